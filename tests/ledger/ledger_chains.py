"""A real two-session audit chain and the tampering recipes the ledger tests apply to it.

The clean chain comes from an in-process Warden (default bundle, TEST_IKM): session A is
sessionStart, userMessage, three toolCallRequests and sessionEnd (seq 0–5); session B is
sessionStart, one toolCallRequest and sessionEnd (seq 0–2). It is exported with
:func:`warden.ledger.export.export_records` (what ``warden export`` writes), so it ends with
the signed export manifest listing both sessions' heads. Each :class:`Tamper` is a pure
function of the clean records plus the exact failure the verifier must report (verified as
an export file: ``require_manifest=True``, like ``warden verify FILE``).

``tests/assets/ledger/chain_clean.jsonl`` and the ``chain_*.jsonl`` hostile files are this
module's output; regenerate them with ``python tests/ledger/ledger_chains.py`` (the tests
check that every hostile asset is exactly its recipe applied to the clean asset).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import derive_session_key, hmac_sign
from warden.errors import IntegrityReason
from warden.ledger.chain import chain_entry, entry_content
from warden.ledger.records import manifest_signing_input
from warden.runtime import Runtime

Record = dict[str, Any]
# A line that is not a record (str) is written verbatim: used for the garbage-line case.
Line = Record | str

LEDGER_ASSETS = Path(__file__).resolve().parent.parent / "assets" / "ledger"
CLEAN_ASSET = "ledger/chain_clean.jsonl"
# A session id no chain holds, for the manifest that lists one session too many.
EXTRA_SESSION_ID = "00000000-0000-4000-8000-00000000dead"


# -- producing and serialising chains ----------------------------------------------------


def produce_chain(rt: Runtime, *, audited: bool = True) -> tuple[str, str]:
    """Drive two real sessions through ``rt`` in process; return their session ids (A, B).

    Without the approval desk: the ask (delete_file) is answered as the bundle says and
    files no task, so the export holds exactly these two agent sessions (the desk's own
    chain is covered by tests/approvals) — and, ``audited`` (the default, what a database
    `warden verify` needs), the two agents' registration chains; ``audited=False`` leaves
    them out, for the tests of exported chains and their assets."""
    from conftest import service_client

    rt.acs.approval_gate = None

    a = service_client(rt, agent_id="agent-a", audited=audited)
    steps_a = [
        a.hello(),
        a.call("steps/sessionStart", {}),
        a.call("steps/userMessage", {"content": [{"type": "text", "value": "tidy my notes"}]}),
        a.tool_call("read_file", {"path": "/home/u/notes.txt"}),
        a.tool_call("delete_file", {"path": "/home/u/old.txt"}),
        a.tool_call("login", {"user": "u", "password": "hunter2"}),
        a.call("steps/sessionEnd", {"reason": "completed"}),
    ]
    b = service_client(rt, agent_id="agent-b", audited=audited)
    steps_b = [
        b.hello(),
        b.call("steps/sessionStart", {}),
        b.tool_call("shell", {"cmd": "rm -rf /"}),
        b.call("steps/sessionEnd", {"reason": "completed"}),
    ]
    for response in steps_a + steps_b:
        assert "result" in response, response
    return a.session_id, b.session_id


def dump_lines(lines: list[Line]) -> str:
    return "".join(
        (line if isinstance(line, str) else json.dumps(line, ensure_ascii=False, sort_keys=True))
        + "\n"
        for line in lines
    )


def load_records(path: Path) -> list[Record]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def session_ids(records: list[Line]) -> list[str]:
    return [r["session_id"] for r in records if isinstance(r, dict) and r["kind"] == "session"]


# -- locating records --------------------------------------------------------------------


def _sid(records: list[Line], session: int) -> str:
    return session_ids(records)[session]


def _entry_index(records: list[Line], session: int, seq: int) -> int:
    sid = _sid(records, session)
    for i, r in enumerate(records):
        if (
            isinstance(r, dict)
            and r["kind"] == "entry"
            and (r["session_id"], r["seq"]) == (sid, seq)
        ):
            return i
    raise LookupError(f"no entry seq {seq} in session {session}")


def _head_index(records: list[Line], session: int) -> int:
    sid = _sid(records, session)
    for i, r in enumerate(records):
        if isinstance(r, dict) and r["kind"] == "head" and r["session_id"] == sid:
            return i
    raise LookupError(f"no head record in session {session}")


def _manifest_index(records: list[Line]) -> int:
    for i, r in enumerate(records):
        if isinstance(r, dict) and r["kind"] == "manifest":
            return i
    raise LookupError("no manifest record")


def _manifest(records: list[Line]) -> Record:
    rec = records[_manifest_index(records)]
    assert isinstance(rec, dict)
    return rec


def _last_seq(records: list[Line], session: int) -> int:
    rec = records[_head_index(records, session)]
    assert isinstance(rec, dict)
    return int(rec["seq"])


def _flip_decision(decision: str) -> str:
    return "allow" if decision != "allow" else "deny"


def _flip_b64(value: str) -> str:
    return ("B" if value[0] == "A" else "A") + value[1:]


# -- the recipes -------------------------------------------------------------------------


def edit_entry_content(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    rec = out[_entry_index(out, 0, 2)]
    assert isinstance(rec, dict)
    rec["entry"]["verdict"]["decision"] = _flip_decision(rec["entry"]["verdict"]["decision"])
    return out


def _rehash_from(out: list[Line], session: int, seq: int, *, patch_responses: bool) -> None:
    """Recompute entry hashes (keyless) from ``seq`` to the session end, as an attacker can."""
    previous: str | None = None
    if seq > 0:
        prev = out[_entry_index(out, session, seq - 1)]
        assert isinstance(prev, dict)
        previous = prev["entry"]["entry_hash"]
    for s in range(seq, _last_seq(out, session) + 1):
        rec = out[_entry_index(out, session, s)]
        assert isinstance(rec, dict)
        rec["entry"] = chain_entry(entry_content(rec["entry"]), previous)
        previous = rec["entry"]["entry_hash"]
        if patch_responses and "response" in rec:
            rec["response"]["result"]["chain_hash"] = previous
    head = out[_head_index(out, session)]
    assert isinstance(head, dict)
    head["chain_hash"] = previous


def edit_entry_rehashed(records: list[Line]) -> list[Line]:
    out = edit_entry_content(records)
    _rehash_from(out, 0, 2, patch_responses=False)
    return out


def edit_entry_rehashed_responses(records: list[Line]) -> list[Line]:
    out = edit_entry_content(records)
    _rehash_from(out, 0, 2, patch_responses=True)
    return out


def edit_response_decision(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    rec = out[_entry_index(out, 0, 3)]
    assert isinstance(rec, dict)
    result = rec["response"]["result"]
    result["decision"] = _flip_decision(result["decision"])
    return out


def delete_entry(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    del out[_entry_index(out, 0, 2)]
    return out


def swap_entry_contents(records: list[Line]) -> list[Line]:
    """Swap what entries seq 1 and 2 hold, keeping the records' seq numbers in place."""
    out = copy.deepcopy(records)
    i, j = _entry_index(out, 0, 1), _entry_index(out, 0, 2)
    a, b = out[i], out[j]
    assert isinstance(a, dict) and isinstance(b, dict)
    for key in ("entry", "response"):
        a[key], b[key] = b[key], a[key]
    return out


def swap_lines(records: list[Line]) -> list[Line]:
    """Swap the records of entries seq 1 and 2 verbatim (seq numbers travel with them)."""
    out = copy.deepcopy(records)
    i, j = _entry_index(out, 0, 1), _entry_index(out, 0, 2)
    out[i], out[j] = out[j], out[i]
    return out


def insert_copy(records: list[Line]) -> list[Line]:
    """Insert a verbatim copy of entry seq 2 right after it."""
    out = copy.deepcopy(records)
    i = _entry_index(out, 0, 2)
    out.insert(i + 1, copy.deepcopy(out[i]))
    return out


def insert_copy_renumbered(records: list[Line]) -> list[Line]:
    """Insert a copy of entry seq 2 as seq 3 and renumber everything after it."""
    out = copy.deepcopy(records)
    sid = _sid(out, 0)
    i = _entry_index(out, 0, 2)
    dup = copy.deepcopy(out[i])
    for r in out[i + 1 :]:
        if isinstance(r, dict) and r.get("session_id") == sid and r["kind"] in ("entry", "head"):
            r["seq"] += 1
    assert isinstance(dup, dict)
    dup["seq"] = 3
    out.insert(i + 1, dup)
    return out


def truncate_tail(records: list[Line]) -> list[Line]:
    """Drop session A's last entry; keep its signed head."""
    out = copy.deepcopy(records)
    del out[_entry_index(out, 0, _last_seq(out, 0))]
    return out


def truncate_tail_rewrite_head(records: list[Line]) -> list[Line]:
    """Drop session A's last entry and point its head at the new tail (keyless forgery)."""
    out = truncate_tail(records)
    last = _last_seq(out, 0) - 1
    tail = out[_entry_index(out, 0, last)]
    head = out[_head_index(out, 0)]
    assert isinstance(tail, dict) and isinstance(head, dict)
    head["seq"] = last
    head["chain_hash"] = tail["entry"]["entry_hash"]
    return out


def drop_head(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    del out[_head_index(out, 1)]
    return out


def tamper_head_signature(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    head = out[_head_index(out, 0)]
    assert isinstance(head, dict)
    head["signature"]["value"] = _flip_b64(head["signature"]["value"])
    return out


def drop_first_entry(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    del out[_entry_index(out, 0, 0)]
    return out


def swap_responses(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    a, b = out[_entry_index(out, 1, 0)], out[_entry_index(out, 1, 1)]
    assert isinstance(a, dict) and isinstance(b, dict)
    a["response"], b["response"] = b["response"], a["response"]
    return out


def strip_response(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    rec = out[_entry_index(out, 1, 1)]
    assert isinstance(rec, dict)
    del rec["response"]
    return out


def garbage_line(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    out.insert(3, '{"kind": "entry", "seq": 2,')
    return out


def duplicate_key_line(records: list[Line]) -> list[Line]:
    """A seq 3 (delete_file, an ask) with a second ``verdict`` key smuggled in front of
    the real one: a lenient parser keeps the last (the hash still matches), SQLite's
    json_extract and many others the first (allow)."""
    out = copy.deepcopy(records)
    i = _entry_index(out, 0, 3)
    line = dump_lines([out[i]]).rstrip("\n")
    assert line.count('"verdict": ') == 1
    out[i] = line.replace('"verdict": ', '"verdict": {"decision": "allow"}, "verdict": ')
    return out


# -- recipes against the session record and the head's closed flag -----------------------


def _session_record(out: list[Line], session: int) -> Record:
    sid = _sid(out, session)
    for r in out:
        if isinstance(r, dict) and r["kind"] == "session" and r["session_id"] == sid:
            return r
    raise LookupError(f"no session record {session}")


def edit_session_agent(records: list[Line]) -> list[Line]:
    """Session A attributed to session B's agent (keyless: signature left as is)."""
    out = copy.deepcopy(records)
    _session_record(out, 0)["agent_id"] = _session_record(out, 1)["agent_id"]
    return out


def edit_session_negotiated(records: list[Line]) -> list[Line]:
    """Session A's negotiated methods rewritten to what it never negotiated."""
    out = copy.deepcopy(records)
    hello = _session_record(out, 0)["negotiated"]["server_hello"]
    hello["methods_evaluated"] = [*hello["methods_evaluated"], "agbom/query"]
    return out


def strip_session_signature(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    del _session_record(out, 0)["signature"]
    return out


def reopen_head(records: list[Line]) -> list[Line]:
    """Session A's head says the session is still open (it ended with sessionEnd)."""
    out = copy.deepcopy(records)
    head = out[_head_index(out, 0)]
    assert isinstance(head, dict) and head["closed"] is True
    head["closed"] = False
    return out


def strip_head_closed(records: list[Line]) -> list[Line]:
    """The ``closed`` member removed from A's head, as if it were an older export."""
    out = copy.deepcopy(records)
    head = out[_head_index(out, 0)]
    assert isinstance(head, dict)
    del head["closed"]
    return out


# -- recipes against the export manifest -------------------------------------------------


def _without_session(records: list[Line], session: int) -> list[Line]:
    """Every record of ``session`` (its session, entry and head records) removed."""
    sid = _sid(records, session)
    return [
        copy.deepcopy(r)
        for r in records
        if not (isinstance(r, dict) and r.get("session_id") == sid)
    ]


def delete_first_session(records: list[Line]) -> list[Line]:
    return _without_session(records, 0)


def delete_last_session(records: list[Line]) -> list[Line]:
    return _without_session(records, 1)


def delete_session_rewrite_manifest(records: list[Line]) -> list[Line]:
    """Delete session B and drop it from the manifest too (keyless: signature left as is)."""
    sid = _sid(records, 1)
    out = _without_session(records, 1)
    manifest = _manifest(out)
    manifest["sessions"] = [s for s in manifest["sessions"] if s["session_id"] != sid]
    return out


def drop_manifest(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    del out[_manifest_index(out)]
    return out


def truncate_at_session(records: list[Line]) -> list[Line]:
    """Cut the file right after session A's head: session B and the manifest are gone."""
    return drop_manifest(delete_last_session(records))


def edit_manifest_head(records: list[Line]) -> list[Line]:
    """Move session A's head in the manifest back to seq 4 (its real entry hash)."""
    out = copy.deepcopy(records)
    sid = _sid(out, 0)
    tail = out[_entry_index(out, 0, 4)]
    assert isinstance(tail, dict)
    for item in _manifest(out)["sessions"]:
        if item["session_id"] == sid:
            item["seq"] = 4
            item["chain_hash"] = tail["entry"]["entry_hash"]
    return out


def forge_manifest_signature(records: list[Line]) -> list[Line]:
    out = copy.deepcopy(records)
    sig = _manifest(out)["signature"]
    sig["value"] = _flip_b64(sig["value"])
    return out


def sign_manifest_with_session_key(records: list[Line]) -> list[Line]:
    """Re-sign the manifest (correctly, with the real IKM) under session A's key instead
    of the export-manifest key: the key separation must refuse it."""
    from conftest import TEST_IKM

    out = copy.deepcopy(records)
    manifest = _manifest(out)
    key = derive_session_key(TEST_IKM, _sid(out, 0))
    manifest["signature"]["value"] = hmac_sign(
        key, canonical_bytes(manifest_signing_input(manifest))
    )
    return out


def manifest_extra_session(records: list[Line]) -> list[Line]:
    """The manifest lists a session the export does not hold (signature left as is)."""
    out = copy.deepcopy(records)
    _manifest(out)["sessions"].append(
        {"session_id": EXTRA_SESSION_ID, "seq": -1, "chain_hash": None}
    )
    return out


def records_after_manifest(records: list[Line]) -> list[Line]:
    """Move the manifest before session B: B's records now follow it."""
    out = copy.deepcopy(records)
    manifest = out.pop(_manifest_index(out))
    first_b = next(
        i
        for i, r in enumerate(out)
        if isinstance(r, dict) and r["kind"] == "session" and r["session_id"] == _sid(out, 1)
    )
    out.insert(first_b, manifest)
    return out


@dataclass(frozen=True)
class Tamper:
    """A tampering recipe and the exact failure it must produce."""

    asset: str  # file name under tests/assets/ledger/
    apply: Callable[[list[Line]], list[Line]]
    reason: IntegrityReason
    # the session the error names: an index into the clean chain's sessions, a literal
    # session id (str), or None (no session)
    session: int | str | None
    seq: int | None  # entry seq the error names (None: a head/session/manifest failure)
    message: str  # a fragment the error message must contain

    @property
    def path(self) -> str:
        return f"ledger/{self.asset}"

    def session_id(self, sids: list[str]) -> str | None:
        """The session id the error must name, given the clean chain's session ids."""
        return sids[self.session] if isinstance(self.session, int) else self.session


CM, RH, SI = (
    IntegrityReason.CHAIN_MISMATCH,
    IntegrityReason.RECORD_HASH_MISMATCH,
    IntegrityReason.SIGNATURE_INVALID,
)

TAMPERS: tuple[Tamper, ...] = (
    Tamper("chain_entry_edited.jsonl", edit_entry_content, RH, 0, 2, "≠ recomputed"),
    Tamper(
        "chain_entry_edited_rehashed.jsonl",
        edit_entry_rehashed,
        CM,
        0,
        2,
        "the response did not publish this entry's hash",
    ),
    Tamper(
        "chain_entry_edited_rehashed_responses.jsonl",
        edit_entry_rehashed_responses,
        SI,
        0,
        2,
        "signature does not verify",
    ),
    Tamper(
        "chain_response_decision_edited.jsonl",
        edit_response_decision,
        SI,
        0,
        3,
        "signature does not verify",
    ),
    Tamper("chain_entry_deleted.jsonl", delete_entry, CM, 0, 3, "expected seq 2, found 3"),
    Tamper("chain_entries_swapped.jsonl", swap_entry_contents, CM, 0, 1, "does not link to"),
    Tamper("chain_lines_swapped.jsonl", swap_lines, CM, 0, 2, "expected seq 1, found 2"),
    Tamper("chain_entry_inserted.jsonl", insert_copy, CM, 0, 2, "expected seq 3, found 2"),
    Tamper(
        "chain_entry_inserted_renumbered.jsonl",
        insert_copy_renumbered,
        CM,
        0,
        3,
        "does not link to",
    ),
    Tamper(
        "chain_tail_truncated.jsonl",
        truncate_tail,
        CM,
        0,
        None,
        "signed head (seq 5,",
    ),
    Tamper(
        "chain_tail_truncated_head_rewritten.jsonl",
        truncate_tail_rewrite_head,
        SI,
        0,
        None,
        "signature does not verify",
    ),
    Tamper("chain_head_dropped.jsonl", drop_head, CM, 1, None, "no signed head record"),
    Tamper(
        "chain_head_signature_tampered.jsonl",
        tamper_head_signature,
        SI,
        0,
        None,
        "signature does not verify",
    ),
    Tamper(
        "chain_first_entry_dropped.jsonl", drop_first_entry, CM, 0, 1, "expected seq 0, found 1"
    ),
    Tamper(
        "chain_response_swapped.jsonl",
        swap_responses,
        CM,
        1,
        0,
        "the response did not publish this entry's hash",
    ),
    Tamper(
        "chain_response_stripped.jsonl",
        strip_response,
        SI,
        1,
        1,
        "wire step without its signed response",
    ),
    Tamper("chain_garbage_line.jsonl", garbage_line, RH, None, None, ":4: not JSON"),
    Tamper(
        "chain_duplicate_key.jsonl",
        duplicate_key_line,
        RH,
        None,
        None,
        ":5: not strict JSON (duplicate object key 'verdict')",
    ),
    # the session record and the head's closed flag
    Tamper(
        "chain_session_agent_edited.jsonl",
        edit_session_agent,
        SI,
        0,
        None,
        "session record signature does not verify",
    ),
    Tamper(
        "chain_session_negotiated_edited.jsonl",
        edit_session_negotiated,
        SI,
        0,
        None,
        "session record signature does not verify",
    ),
    Tamper(
        "chain_session_signature_stripped.jsonl",
        strip_session_signature,
        SI,
        0,
        None,
        "session record signature missing",
    ),
    Tamper(
        "chain_head_reopened.jsonl",
        reopen_head,
        CM,
        0,
        None,
        "the head says the session is open, but it ended (steps/sessionEnd at seq 5)",
    ),
    Tamper(
        "chain_head_closed_stripped.jsonl",
        strip_head_closed,
        SI,
        0,
        None,
        "head signature does not verify",
    ),
    # the export manifest
    Tamper(
        "chain_session_deleted.jsonl",
        delete_first_session,
        CM,
        0,
        None,
        "listed in the manifest but missing from the export",
    ),
    Tamper(
        "chain_last_session_deleted.jsonl",
        delete_last_session,
        CM,
        1,
        None,
        "listed in the manifest but missing from the export",
    ),
    Tamper(
        "chain_session_deleted_manifest_rewritten.jsonl",
        delete_session_rewrite_manifest,
        SI,
        None,
        None,
        "manifest signature does not verify",
    ),
    Tamper(
        "chain_manifest_dropped.jsonl",
        drop_manifest,
        CM,
        None,
        None,
        "no signed manifest at the end of the export",
    ),
    Tamper(
        "chain_truncated_at_session.jsonl",
        truncate_at_session,
        CM,
        None,
        None,
        "no signed manifest at the end of the export",
    ),
    Tamper(
        "chain_manifest_head_edited.jsonl",
        edit_manifest_head,
        CM,
        0,
        None,
        "manifest head (4, ",
    ),
    Tamper(
        "chain_manifest_signature_forged.jsonl",
        forge_manifest_signature,
        SI,
        None,
        None,
        "manifest signature does not verify",
    ),
    Tamper(
        "chain_manifest_signed_with_session_key.jsonl",
        sign_manifest_with_session_key,
        SI,
        None,
        None,
        "manifest signature does not verify",
    ),
    Tamper(
        "chain_manifest_extra_session.jsonl",
        manifest_extra_session,
        CM,
        EXTRA_SESSION_ID,
        None,
        "listed in the manifest but missing from the export",
    ),
    Tamper(
        "chain_records_after_manifest.jsonl",
        records_after_manifest,
        CM,
        1,
        None,
        "records after the manifest",
    ),
)


def write_assets() -> None:  # pragma: no cover - maintenance entry point
    """Regenerate tests/assets/ledger/chain_*.jsonl from a fresh in-process Warden."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from conftest import DEFAULT_POLICY, TEST_IKM, write_key

    from warden.ledger.export import export_records
    from warden.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        rt = Runtime.start(
            Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
        )
        try:
            produce_chain(rt, audited=False)
            clean: list[Line] = list(export_records(rt.store, TEST_IKM))
        finally:
            rt.close()
    LEDGER_ASSETS.mkdir(parents=True, exist_ok=True)
    (LEDGER_ASSETS / "chain_clean.jsonl").write_text(dump_lines(clean), encoding="utf-8")
    for t in TAMPERS:
        (LEDGER_ASSETS / t.asset).write_text(dump_lines(t.apply(clean)), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    write_assets()
