"""The transparency log's part of an export (``warden export``), and reading it back.

An export ends, just before its manifest, with one ``{"kind": "log", ...}`` record:

* ``checkpoint``: the newest signed checkpoint note (``warden export`` signs a fresh one
  first when it can read the checkpoint key), ``cosignatures``: its witnesses' lines;
* ``indexes``: per exported session, the leaf index of each entry by seq;
* ``events``: ``[index, text]`` of every leaf that is no entry (starts, bundle loads,
  key changes) — whole exports only;
* ``proofs``: for an export of one session, the RFC 9162 inclusion proof (base64) of
  each of its leaves in the checkpoint's tree, by index.

So an export verifies offline with nothing but the checkpoint key: a whole export
rebuilds the tree and must reproduce the checkpoint's root; a one-session export
proves each of its leaves into it. An entry's leaf bytes are its JSON as Warden stores
it (compact, keys in stored order), which reading and re-serialising reproduces
exactly: nothing is re-canonicalized.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, text

from warden.store import tlog_sql
from warden.tlog.audit import LogProblem, LogReport, check_log, read_checkpoint
from warden.tlog.merkle import MerkleTree, leaf_hash, verify_inclusion
from warden.tlog.note import NoteVerifier


def entry_bytes(entry: dict[str, Any]) -> bytes:
    """The stored bytes of an entry (what the store wrote; see module docstring)."""
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def log_record(engine: Engine, session_id: str | None = None) -> dict[str, Any] | None:
    """The export's ``log`` record (None when no checkpoint was ever signed)."""
    cp = tlog_sql.latest_checkpoint(engine)
    if cp is None:
        return None
    indexes: dict[str, list[int | None]] = {}
    q = "SELECT session_id, seq, log_index FROM entries"
    params: dict[str, Any] = {}
    if session_id is not None:
        q += " WHERE session_id = :s"
        params["s"] = session_id
    with engine.connect() as conn:
        for sid, seq, index in conn.execute(text(q + " ORDER BY session_id, seq"), params):
            row = indexes.setdefault(sid, [])
            row.extend([None] * (int(seq) + 1 - len(row)))
            row[int(seq)] = int(index) if index is not None else None
    rec: dict[str, Any] = {
        "kind": "log",
        "checkpoint": cp.note,
        "cosignatures": [s.line for s in tlog_sql.cosignatures(engine, cp.tree_size)],
        "indexes": indexes,
    }
    if session_id is None:
        with engine.connect() as conn:
            rec["events"] = [
                [int(r[0]), r[1]]
                for r in conn.execute(text("SELECT log_index, event FROM log_events ORDER BY 1"))
            ]
    else:
        tree = MerkleTree(leaf_hash(bytes(t)) for _, t in tlog_sql.iter_leaves(engine))
        proofs: dict[str, list[str]] = {}
        for row in indexes.values():
            for index in row:
                if index is not None and index < cp.tree_size:
                    path = tree.inclusion_proof(index, cp.tree_size)
                    proofs[str(index)] = [base64.b64encode(p).decode() for p in path]
        rec["proofs"] = proofs
    return rec


def check_export_log(
    records: Iterable[dict[str, Any]],
    *,
    verifier: NoteVerifier | None,
    trusted: str | None = None,
) -> LogReport:
    """Check the ``log`` record of an export's records against its entries.

    LogProblem at the first problem: no log record, an entry without an index, a leaf
    missing, a root or a proof that does not match, a bad signature.
    """
    leaves: dict[int, bytes] = {}
    log_rec: dict[str, Any] | None = None
    entries: list[tuple[str, int, bytes]] = []
    for rec in records:
        if rec.get("kind") == "entry":
            entries.append((rec["session_id"], rec["seq"], entry_bytes(rec["entry"])))
        elif rec.get("kind") == "log":
            log_rec = rec
    if log_rec is None:
        raise LogProblem("log_missing", "the export carries no log record (no checkpoint)")
    indexes: dict[str, list[int | None]] = log_rec.get("indexes") or {}
    for sid, seq, data in entries:
        row = indexes.get(sid) or []
        index = row[seq] if seq < len(row) else None
        if index is None:
            raise LogProblem("log_unindexed", f"session {sid} entry seq {seq} is no leaf")
        leaves[index] = data
    if "proofs" not in log_rec:
        for index, event in log_rec.get("events") or []:
            leaves[int(index)] = str(event).encode("utf-8")
        ordered = sorted(leaves.items())
        return check_log(ordered, [log_rec["checkpoint"]], verifier=verifier, trusted=trusted)
    # One session: prove each leaf into the checkpoint.
    cp = read_checkpoint(log_rec["checkpoint"], verifier, "the export's checkpoint")
    proofs: dict[str, list[str]] = log_rec["proofs"]
    checked = 0
    for index, data in sorted(leaves.items()):
        if index >= cp.size:
            continue
        path = [base64.b64decode(p) for p in proofs.get(str(index), [])]
        if not verify_inclusion(index, cp.size, leaf_hash(data), path, cp.root):
            raise LogProblem(
                "log_mismatch", f"leaf {index} is not in the checkpoint of size {cp.size}", index
            )
        checked += 1
    report = LogReport(leaves=checked, checkpoints_checked=1, latest_checkpoint=cp.size)
    report.root_hash = cp.root.hex()
    return report
