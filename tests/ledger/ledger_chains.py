"""A real two-session audit chain and the tampering recipes the ledger tests apply to it.

The clean chain comes from an in-process Warden (default bundle, TEST_IKM): session A is
sessionStart, userMessage, three toolCallRequests and sessionEnd (seq 0–5); session B is
sessionStart, one toolCallRequest and sessionEnd (seq 0–2). Each :class:`Tamper` is a pure
function of the clean records plus the exact failure the verifier must report.

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

from warden.errors import IntegrityReason
from warden.ledger.chain import chain_entry, entry_content
from warden.runtime import Runtime

Record = dict[str, Any]
# A line that is not a record (str) is written verbatim: used for the garbage-line case.
Line = Record | str

LEDGER_ASSETS = Path(__file__).resolve().parent.parent / "assets" / "ledger"
CLEAN_ASSET = "ledger/chain_clean.jsonl"


# -- producing and serialising chains ----------------------------------------------------


def produce_chain(rt: Runtime) -> tuple[str, str]:
    """Drive two real sessions through ``rt`` in process; return their session ids (A, B)."""
    from conftest import service_client

    a = service_client(rt, agent_id="agent-a")
    steps_a = [
        a.hello(),
        a.call("steps/sessionStart", {}),
        a.call("steps/userMessage", {"content": [{"type": "text", "value": "tidy my notes"}]}),
        a.tool_call("read_file", {"path": "/home/u/notes.txt"}),
        a.tool_call("delete_file", {"path": "/home/u/old.txt"}),
        a.tool_call("login", {"user": "u", "password": "hunter2"}),
        a.call("steps/sessionEnd", {"reason": "completed"}),
    ]
    b = service_client(rt, agent_id="agent-b")
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
        if isinstance(r, dict) and r["session_id"] == sid and r["kind"] in ("entry", "head"):
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


@dataclass(frozen=True)
class Tamper:
    """A tampering recipe and the exact failure it must produce."""

    asset: str  # file name under tests/assets/ledger/
    apply: Callable[[list[Line]], list[Line]]
    reason: IntegrityReason
    session: int | None  # index of the session the error names (None: no session)
    seq: int | None  # entry seq the error names (None: a head/session-level failure)
    message: str  # a fragment the error message must contain

    @property
    def path(self) -> str:
        return f"ledger/{self.asset}"


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
)


def write_assets() -> None:  # pragma: no cover - maintenance entry point
    """Regenerate tests/assets/ledger/chain_*.jsonl from a fresh in-process Warden."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from conftest import DEFAULT_POLICY, write_key

    from warden.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        rt = Runtime.start(
            Settings(data_dir=data, policy=DEFAULT_POLICY, key_file=write_key(data / "ikm.key"))
        )
        try:
            produce_chain(rt)
            clean: list[Line] = list(rt.store.iter_records())
        finally:
            rt.close()
    LEDGER_ASSETS.mkdir(parents=True, exist_ok=True)
    (LEDGER_ASSETS / "chain_clean.jsonl").write_text(dump_lines(clean), encoding="utf-8")
    for t in TAMPERS:
        (LEDGER_ASSETS / t.asset).write_text(dump_lines(t.apply(clean)), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    write_assets()
