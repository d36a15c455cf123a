"""The RFC 6962 / RFC 9162 Merkle tree: hashes, an appendable tree, and proofs.

Hashing (RFC 9162 §2.1.1), SHA-256 throughout::

    MTH({})        = SHA-256()
    leaf hash      = SHA-256(0x00 || leaf bytes)
    node hash      = SHA-256(0x01 || left || right)
    MTH(D[n])      = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of 2 < n

:class:`MerkleTree` keeps, per level, the hashes of the *complete* subtrees only
(``level h`` holds one 32-byte hash per aligned block of 2**h leaves) in flat
``bytearray`` s: 64 bytes per leaf in all, appends are amortised O(1), and any
root, inclusion proof (RFC 9162 §2.1.3.1) or consistency proof (§2.1.4.1) of any
earlier size is O(log² n) hashing at most. The verifiers (§2.1.3.2, §2.1.4.2)
need nothing but the proof. Every hash here is 32 raw bytes; callers encode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

HASH_SIZE = 32
_LEAF = b"\x00"
_NODE = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof was asked for sizes or indexes the tree cannot answer (or is malformed)."""


_LEAF_PREFIX = hashlib.sha256(_LEAF)


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 §2.1.1 leaf hash of ``data``: SHA-256(0x00 || data), 32 bytes."""
    h = _LEAF_PREFIX.copy()
    h.update(data)
    return h.digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 §2.1.1 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(_NODE + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """An append-only tree of leaf hashes (see the module docstring)."""

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self.extend(leaf_hashes)

    @property
    def size(self) -> int:
        """The number of leaves."""
        return len(self._levels[0]) // HASH_SIZE

    def _get(self, level: int, index: int) -> bytes:
        at = index * HASH_SIZE
        return bytes(self._levels[level][at : at + HASH_SIZE])

    def append(self, leaf: bytes) -> None:
        """Append one leaf *hash* (32 bytes; see :func:`leaf_hash`)."""
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
        self._levels[0] += leaf
        index, level, current = self.size - 1, 0, leaf
        # Each completed right child completes its parent: at most log2(n) hashes, and
        # amortised one per leaf.
        while index & 1:
            left = self._get(level, index - 1)
            current = node_hash(left, current)
            level += 1
            index >>= 1
            if len(self._levels) == level:
                self._levels.append(bytearray())
            self._levels[level] += current

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append leaf hashes in order; in bulk, level by level (the verifier's path: one
        SHA-256 per node, no per-leaf Python bookkeeping beyond the copy)."""
        batch = b"".join(leaves)
        if len(batch) % HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes")
        if not batch:
            return
        self._levels[0] += batch
        level = 0
        while True:
            below = self._levels[level]
            count = len(below) // HASH_SIZE
            if count < 2:
                return
            if len(self._levels) == level + 1:
                self._levels.append(bytearray())
            above = self._levels[level + 1]
            done = len(above) // HASH_SIZE  # parents already complete
            pairs = count // 2
            if pairs == done:
                return
            view = memoryview(below)
            prefix = hashlib.sha256(_NODE)
            out = bytearray()
            for at in range(2 * done * HASH_SIZE, 2 * pairs * HASH_SIZE, 2 * HASH_SIZE):
                h = prefix.copy()
                h.update(view[at : at + 2 * HASH_SIZE])
                out += h.digest()
            view.release()
            above += out
            level += 1

    def leaf(self, index: int) -> bytes:
        """The leaf hash at ``index`` (ProofError when out of range)."""
        if not 0 <= index < self.size:
            raise ProofError(f"leaf index {index} is outside the tree of size {self.size}")
        return self._get(0, index)

    def _range(self, lo: int, hi: int) -> bytes:
        """MTH of the leaves [lo, hi) for ranges the RFC recursion produces (lo is
        aligned to the largest power of two not above hi - lo)."""
        n = hi - lo
        if n == 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            return self._get(n.bit_length() - 1, lo // n)
        k = _split(n)
        return node_hash(self._range(lo, lo + k), self._range(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first ``size`` leaves (default: all). ProofError beyond the tree."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ProofError(f"size {size} is outside the tree of size {self.size}")
        return self._range(0, size)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """RFC 9162 §2.1.3.1 PATH(index, D[size]): the audit path, leaf to root.

        ProofError unless 0 <= index < size <= tree size.
        """
        if not 0 < size <= self.size or not 0 <= index < size:
            raise ProofError(
                f"no inclusion proof for index {index} in size {size} "
                f"(need 0 <= index < size <= {self.size})"
            )
        path: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                path.append(self._range(lo + k, hi))
                hi = lo + k
            else:
                path.append(self._range(lo, lo + k))
                lo += k
        path.reverse()
        return path

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        """RFC 9162 §2.1.4.1 PROOF(first, D[second]).

        Empty when ``first`` is 0 or equals ``second``. ProofError unless
        0 <= first <= second <= tree size.
        """
        if not 0 <= first <= second <= self.size:
            raise ProofError(
                f"no consistency proof from size {first} to size {second} "
                f"(need 0 <= from <= to <= {self.size})"
            )
        if first == 0 or first == second:
            return []
        path: list[bytes] = []
        lo, hi, m, complete = 0, second, first, True
        while True:
            n = hi - lo
            if m == n:
                if not complete:
                    path.append(self._range(lo, hi))
                break
            k = _split(n)
            if m <= k:
                path.append(self._range(lo + k, hi))
                hi = lo + k
            else:
                path.append(self._range(lo, lo + k))
                lo += k
                m -= k
                complete = False
        path.reverse()
        return path


def verify_inclusion(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: does ``path`` prove leaf hash ``leaf`` at ``index`` in the
    tree of ``size`` leaves whose root is ``root``?"""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, path: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``path`` prove the tree of ``second`` leaves with root
    ``second_root`` extends the tree of ``first`` leaves with root ``first_root``?

    Equal sizes need equal roots and an empty path; size 0 is consistent with every
    larger tree (empty path).
    """
    if not 0 <= first <= second:
        return False
    if first == second:
        return not path and first_root == second_root
    if first == 0:
        return not path
    if not path:
        return False
    nodes = list(path)
    if first & (first - 1) == 0:
        nodes.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = nodes[0]
    for c in nodes[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0
