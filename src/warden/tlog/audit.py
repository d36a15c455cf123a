"""Offline checks of the transparency log: the leaves against the signed checkpoints.

:func:`check_log` takes the leaves in index order (their stored bytes; nothing is
re-canonicalized) and the checkpoint notes, and reports the first thing wrong:

* ``log_gap``         an index is missing or repeated (a deleted entry or session, a
                      renumbered row), naming the first missing index;
* ``log_unindexed``   an entry that is no leaf (``log_index`` NULL: inserted by hand);
* ``log_truncated``   a checkpoint (stored, or one a client kept: ``trusted``) is larger
                      than the log: leaves were cut off the tail, or the database was
                      restored from an older copy (rollback);
* ``log_mismatch``    the leaves do not reproduce a checkpoint's root (an edit, insert
                      or swap), naming the checkpoint and the first leaf of the smallest
                      subtree that differs when the checkpoint's own proofs are known;
* ``log_signature``   a checkpoint note does not verify under the checkpoint key.

Hashing runs over the stored bytes in one pass (one SHA-256 per leaf and per node).
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from warden.tlog.merkle import MerkleTree
from warden.tlog.note import (
    Checkpoint,
    NoteError,
    NoteVerifier,
    parse_checkpoint,
    parse_note,
    verify_note,
)

#: The RFC 9162 leaf prefix (0x00) already absorbed; copied once per leaf.
_LEAF_PREFIX = hashlib.sha256(b"\x00")


@dataclass
class LogProblem(Exception):
    """The first problem found: a reason code and a message naming the leaf or row."""

    reason: str
    message: str
    index: int | None = None
    #: Every row found wrong (``state_mismatch``: table, row, message, log_index).
    details: list[dict[str, Any]] | None = None

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclass
class LogReport:
    """What a clean check saw."""

    leaves: int = 0
    checkpoints_checked: int = 0
    latest_checkpoint: int | None = None
    trusted_checkpoint: int | None = None
    root_hash: str = ""
    seconds: float = 0.0
    tree: MerkleTree = field(default_factory=MerkleTree, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "leaves": self.leaves,
            "root_hash": self.root_hash,
            "checkpoints_checked": self.checkpoints_checked,
            "latest_checkpoint": self.latest_checkpoint,
            "trusted_checkpoint": self.trusted_checkpoint,
            "leaves_per_second": round(self.leaves / self.seconds) if self.seconds > 0 else None,
        }


def build_tree(leaves: Iterable[tuple[Any, bytes]]) -> tuple[MerkleTree, float]:
    """The tree over ``(index, leaf bytes)`` given in index order, and the seconds it took;
    LogProblem(``log_gap``) at the first index out of sequence."""
    it = iter(leaves)
    return build_tree_pages(iter(lambda: list(itertools.islice(it, _CHUNK)), []))


#: Leaves checked and hashed per step when they do not come in pages already.
_CHUNK = 10_000


def build_tree_pages(pages: Iterable[list[tuple[Any, bytes]]]) -> tuple[MerkleTree, float]:
    """:func:`build_tree` over the leaves in pages (lists in index order, e.g.
    :func:`warden.store.tlog_sql.iter_leaf_pages`): each page's indexes are checked and
    its leaves hashed in bulk, so the per-leaf Python work is one comprehension step."""
    began = time.perf_counter()
    tree = MerkleTree()
    expected = 0
    prefix = _LEAF_PREFIX
    for page in pages:
        indexes = [row[0] for row in page]
        if indexes != list(range(expected, expected + len(page))):
            _first_gap(indexes, expected)
        hashes = bytearray()
        for _, data in page:
            h = prefix.copy()
            h.update(data)
            hashes += h.digest()
        tree.extend((bytes(hashes),))
        expected += len(page)
    return tree, time.perf_counter() - began


def _first_gap(indexes: list[Any], expected: int) -> None:
    """LogProblem(``log_gap``) at the first of ``indexes`` that is not ``expected`` on."""
    for index in indexes:
        if index != expected:
            if isinstance(index, int) and index > expected:
                msg = f"leaf index {expected} is missing (the next leaf present is {index})"
            else:
                msg = f"leaf index {index!r} is out of sequence after {expected - 1}"
            raise LogProblem("log_gap", msg, expected)
        expected += 1


def read_checkpoint(note_text: str, verifier: NoteVerifier | None, what: str) -> Checkpoint:
    """The checkpoint in a note, its signature checked when ``verifier`` is given;
    LogProblem(``log_signature``) naming ``what`` otherwise."""
    try:
        note = parse_note(note_text)
        if verifier is not None:
            verify_note(note, verifier)
        cp = parse_checkpoint(note.text)
    except NoteError as exc:
        raise LogProblem("log_signature", f"{what}: {exc}") from exc
    if verifier is not None and cp.origin != verifier.name:
        raise LogProblem("log_signature", f"{what}: origin {cp.origin!r} is not {verifier.name!r}")
    return cp


def _against(tree: MerkleTree, cp: Checkpoint, what: str, good: int = 0) -> None:
    if cp.size > tree.size:
        raise LogProblem(
            "log_truncated",
            f"{what} covers {cp.size} leaves but the log has {tree.size}: leaves "
            f"{tree.size}..{cp.size - 1} are gone (truncated, or rolled back to an older copy)",
            tree.size,
        )
    if tree.root(cp.size) != cp.root:
        raise LogProblem(
            "log_mismatch",
            f"the first {cp.size} leaves do not reproduce the root of {what}: a leaf in "
            f"{good}..{cp.size - 1} was edited, inserted, swapped or deleted (the smaller "
            "checkpoints still match; the session chains name the row)",
            good,
        )


def check_log(
    leaves: Iterable[Any],
    checkpoints: Iterable[str],
    *,
    verifier: NoteVerifier | None,
    trusted: str | None = None,
    unindexed: int = 0,
    paged: bool = False,
) -> LogReport:
    """Check the leaves against every stored checkpoint note (smallest first) and, if
    given, a ``trusted`` checkpoint a client or witness kept. ``verifier`` (the log's
    checkpoint key) checks the notes' signatures; without it only roots are compared
    (and ``trusted`` cannot be given). ``paged``: ``leaves`` comes in pages (lists), as
    :func:`warden.store.tlog_sql.iter_leaf_pages` gives them. Raises :class:`LogProblem`
    at the first problem.
    """
    if unindexed:
        raise LogProblem("log_unindexed", f"{unindexed} entry row(s) are no leaf of the log")
    tree, seconds = build_tree_pages(leaves) if paged else build_tree(leaves)
    report = LogReport(leaves=tree.size, seconds=seconds, tree=tree)
    report.root_hash = tree.root().hex()
    good = 0
    for note_text in checkpoints:
        cp = read_checkpoint(note_text, verifier, "a stored checkpoint")
        _against(tree, cp, f"the stored checkpoint of size {cp.size}", good)
        good = max(good, cp.size)
        report.checkpoints_checked += 1
        report.latest_checkpoint = max(report.latest_checkpoint or 0, cp.size)
    if trusted is not None:
        if verifier is None:
            raise LogProblem("log_signature", "a kept checkpoint needs the log's key to check")
        cp = read_checkpoint(trusted, verifier, "the kept checkpoint")
        _against(tree, cp, f"the kept checkpoint of size {cp.size}")
        report.trusted_checkpoint = cp.size
    return report
