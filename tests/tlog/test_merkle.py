"""The Merkle tree against an independent, literal transcription of RFC 9162 §2.1
(recursive MTH, PATH, SUBPROOF) and against the RFC 6962 reference vectors of
Certificate Transparency (data copied from google/certificate-transparency's
merkle_tree_test and trillian's log_verifier_test)."""

from __future__ import annotations

import hashlib
import random

import pytest

from warden.tlog.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    ProofError,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)

CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243",
             "5051525354555657", "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (index, size, path) and (from, to, path) from trillian's log_verifier_test.
CT_INCLUSION = [
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip
CT_CONSISTENCY = [
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip


# -- the independent reference: RFC 9162 §2.1 written out literally ---------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:])).digest()


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_mth(d)]
    k = _k(n)
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def _data(n: int) -> list[bytes]:
    return [f"leaf {i}".encode() for i in range(n)]


def _tree(d: list[bytes]) -> MerkleTree:
    return MerkleTree(leaf_hash(x) for x in d)


# -- published vectors ---------------------------------------------------------------


def test_reference_roots() -> None:
    tree = _tree(CT_LEAVES)
    assert tree.root(0) == EMPTY_ROOT
    assert [tree.root(n).hex() for n in range(1, 9)] == CT_ROOTS


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_reference_inclusion(index: int, size: int, path: list[str]) -> None:
    tree = _tree(CT_LEAVES)
    assert [p.hex() for p in tree.inclusion_proof(index, size)] == path
    proof = [bytes.fromhex(p) for p in path]
    root = bytes.fromhex(CT_ROOTS[size - 1])
    assert verify_inclusion(index, size, leaf_hash(CT_LEAVES[index]), proof, root)
    assert not verify_inclusion(index ^ 1, size, leaf_hash(CT_LEAVES[index]), proof, root)


@pytest.mark.parametrize(("first", "second", "path"), CT_CONSISTENCY)
def test_reference_consistency(first: int, second: int, path: list[str]) -> None:
    tree = _tree(CT_LEAVES)
    assert [p.hex() for p in tree.consistency_proof(first, second)] == path
    r1, r2 = bytes.fromhex(CT_ROOTS[first - 1]), bytes.fromhex(CT_ROOTS[second - 1])
    proof = [bytes.fromhex(p) for p in path]
    assert verify_consistency(first, second, r1, r2, proof)
    assert not verify_consistency(first, second, r2, r1, proof)
    assert not verify_consistency(first, second, r1, r2, proof[:-1])


# -- every size up to 70 against the reference -----------------------------------------


def test_every_size_matches_the_reference() -> None:
    d = _data(70)
    tree = _tree(d)
    for n in range(71):
        assert tree.root(n) == ref_mth(d[:n]), n
        for m in range(n):
            path = tree.inclusion_proof(m, n)
            assert path == ref_path(m, d[:n]), (m, n)
            assert verify_inclusion(m, n, leaf_hash(d[m]), path, tree.root(n))
        for m in range(1, n + 1):
            proof = tree.consistency_proof(m, n)
            assert proof == (ref_subproof(m, d[:n], True) if m < n else []), (m, n)
            assert verify_consistency(m, n, tree.root(m), tree.root(n), proof)


def test_random_pairs_and_tampered_proofs_fail() -> None:
    rng = random.Random(9162)
    d = _data(300)
    tree = _tree(d)
    bogus = hashlib.sha256(b"bogus").digest()
    for _ in range(300):
        n = rng.randint(2, 300)
        m = rng.randint(1, n - 1)
        i = rng.randrange(n)
        root = tree.root(n)
        path = tree.inclusion_proof(i, n)
        assert verify_inclusion(i, n, leaf_hash(d[i]), path, root)
        assert not verify_inclusion(i, n, leaf_hash(b"other"), path, root)
        if path:
            j = rng.randrange(len(path))
            assert not verify_inclusion(
                i, n, leaf_hash(d[i]), [*path[:j], bogus, *path[j + 1 :]], root
            )
            assert not verify_inclusion(i, n, leaf_hash(d[i]), path[:-1], root)
        assert not verify_inclusion(i, n, leaf_hash(d[i]), [*path, bogus], root)
        proof = tree.consistency_proof(m, n)
        assert proof == ref_subproof(m, d[:n], True)
        assert verify_consistency(m, n, tree.root(m), root, proof)
        assert not verify_consistency(m, n, tree.root(m), bogus, proof)
        assert not verify_consistency(m, n, bogus, root, proof)
        assert not verify_consistency(m, n, tree.root(m), root, [*proof, bogus])
        assert not verify_consistency(m, n, tree.root(m), root, proof[1:])
        # A forked second tree (one leaf changed before m) is not an extension.
        forked = list(d[:n])
        forked[rng.randrange(m)] = b"forked"
        assert not verify_consistency(m, n, tree.root(m), ref_mth(forked), proof)


def test_edge_cases() -> None:
    tree = _tree(_data(5))
    assert verify_consistency(0, 5, EMPTY_ROOT, tree.root(), [])
    assert not verify_consistency(0, 5, EMPTY_ROOT, tree.root(), [tree.root()])
    assert verify_consistency(5, 5, tree.root(), tree.root(), [])
    assert not verify_consistency(5, 5, tree.root(), tree.root(4), [])
    assert not verify_consistency(5, 4, tree.root(), tree.root(4), [])
    assert not verify_consistency(2, 5, tree.root(2), tree.root(), [])
    assert not verify_inclusion(0, 0, tree.leaf(0), [], EMPTY_ROOT)
    for bad in ((5, 5), (0, 6), (-1, 3)):
        with pytest.raises(ProofError):
            tree.inclusion_proof(*bad)
    with pytest.raises(ProofError):
        tree.consistency_proof(3, 6)
    with pytest.raises(ProofError):
        tree.consistency_proof(4, 3)
    with pytest.raises(ValueError, match="32 bytes"):
        tree.append(b"short")


def test_bulk_extend_in_any_chunks_equals_appending() -> None:
    rng = random.Random(6962)
    hashes = [leaf_hash(d) for d in _data(200)]
    one_by_one = MerkleTree()
    for h in hashes:
        one_by_one.append(h)
    for _ in range(20):
        tree, at = MerkleTree(), 0
        while at < len(hashes):
            step = rng.randint(1, 40)
            tree.extend(hashes[at : at + step])
            at += step
            assert tree.root() == one_by_one.root(tree.size)
        assert [tree.root(n) for n in range(201)] == [one_by_one.root(n) for n in range(201)]
