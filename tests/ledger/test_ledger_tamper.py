"""A tampered audit export is refused at exactly the broken record, with the right reason.

Each hostile case is a named asset (tests/assets/ledger/chain_*.jsonl, a recipe from
ledger_chains.py applied to chain_clean.jsonl, an ``export_records`` export closed by the
signed manifest). Every case is checked three ways: the committed asset through
``verify_records(..., require_manifest=True)``, the same recipe applied to a chain
exported now from a live in-process Warden, and the asset through ``python -m warden
verify FILE``. The store's own records (no manifest: the ``--data-dir`` path) still
verify without one.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_IKM, asset, write_key
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from ledger_chains import (
    CLEAN_ASSET,
    TAMPERS,
    Line,
    Tamper,
    dump_lines,
    load_records,
    produce_chain,
    session_ids,
)

from warden.errors import IntegrityError, IntegrityReason
from warden.ledger.export import export_records
from warden.ledger.verify import VerifyReport, read_jsonl, verify_records
from warden.runtime import Runtime

WRONG_IKM = bytes(range(1, 33))


def _verify_file(path: Path, ikm: bytes | None = TEST_IKM) -> VerifyReport:
    """Verify ``path`` as an export file, as ``warden verify FILE`` does."""
    return verify_records(read_jsonl(path), ikm=ikm, require_manifest=True)


def _assert_refused(exc: IntegrityError, case: Tamper, sids: list[str]) -> None:
    assert exc.integrity_reason is case.reason, exc.diagnostics()
    assert exc.reason == case.reason.value
    assert exc.session_id == case.session_id(sids), exc.diagnostics()
    assert exc.seq == case.seq, exc.diagnostics()
    assert case.message in exc.message, exc.message


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def clean_records() -> list[Line]:
    return list(load_records(asset(CLEAN_ASSET)))


@pytest.fixture
def live(runtime: Runtime, tmp_path: Path) -> tuple[list[Line], list[str], Path]:
    """A chain produced now, exported with export_records (manifest last) to JSONL."""
    sid_a, sid_b = produce_chain(runtime, audited=False)
    records: list[Line] = list(export_records(runtime.store, TEST_IKM))
    assert session_ids(records) == [sid_a, sid_b]
    path = tmp_path / "export.jsonl"
    path.write_text(dump_lines(records), encoding="utf-8")
    return records, [sid_a, sid_b], path


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return write_key(tmp_path / "keys" / "ikm.key")


# -- clean chains ---------------------------------------------------------------------------


def test_clean_asset_verifies(clean_records: list[Line]) -> None:
    report = _verify_file(asset(CLEAN_ASSET))
    heads = {r["session_id"]: r["chain_hash"] for r in clean_records if r["kind"] == "head"}
    # 9 responses + 2 heads + the manifest; and the 2 session records
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 12)
    assert report.session_signatures_checked == 2
    assert report.heads == heads


def test_live_chain_verifies(live: tuple[list[Line], list[str], Path]) -> None:
    records, sids, path = live
    report = _verify_file(path)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 12)
    assert list(report.heads) == sids
    assert report.heads == {
        r["session_id"]: r["chain_hash"] for r in records if r["kind"] == "head"
    }


def test_live_chain_verifies_without_key_checks_no_signature(
    live: tuple[list[Line], list[str], Path],
) -> None:
    report = _verify_file(live[2], ikm=None)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 0)


def test_cli_verifies_clean_export(
    live: tuple[list[Line], list[str], Path], key_file: Path
) -> None:
    _, sids, path = live
    proc = _run_cli("verify", str(path), "--key-file", str(key_file), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["ok"], doc["source"], doc["sessions"], doc["entries"]) == (True, str(path), 2, 9)
    assert doc["signatures_checked"] == 12 and sorted(doc["heads"]) == sorted(sids)


def test_cli_verifies_clean_asset(key_file: Path) -> None:
    proc = _run_cli("verify", str(asset(CLEAN_ASSET)), "--key-file", str(key_file), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["sessions"], doc["entries"], doc["signatures_checked"]) == (2, 9, 12)


# -- hostile exports ------------------------------------------------------------------------


@pytest.mark.parametrize("case", TAMPERS, ids=[t.asset for t in TAMPERS])
def test_hostile_asset_is_its_recipe(case: Tamper, clean_records: list[Line]) -> None:
    expected = dump_lines(case.apply(clean_records))
    assert asset(case.path).read_text(encoding="utf-8") == expected


@pytest.mark.parametrize("case", TAMPERS, ids=[t.asset for t in TAMPERS])
def test_hostile_asset_refused(case: Tamper, clean_records: list[Line]) -> None:
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(case.path))
    _assert_refused(info.value, case, session_ids(clean_records))


@pytest.mark.parametrize("case", TAMPERS, ids=[t.asset for t in TAMPERS])
def test_recipe_on_live_chain_refused(
    case: Tamper, live: tuple[list[Line], list[str], Path], tmp_path: Path
) -> None:
    records, sids, _ = live
    path = tmp_path / case.asset
    path.write_text(dump_lines(case.apply(records)), encoding="utf-8")
    with pytest.raises(IntegrityError) as info:
        _verify_file(path)
    _assert_refused(info.value, case, sids)


@pytest.mark.parametrize("case", TAMPERS, ids=[t.asset for t in TAMPERS])
def test_cli_refuses_hostile_asset(case: Tamper, key_file: Path, clean_records: list[Line]) -> None:
    proc = _run_cli("verify", str(asset(case.path)), "--key-file", str(key_file), "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and "heads" not in doc
    failure = doc["failure"]
    sid = case.session_id(session_ids(clean_records))
    assert (failure["reason"], failure["session_id"], failure["seq"]) == (
        case.reason.value,
        sid,
        case.seq,
    )
    if sid is not None:
        where = f"session {sid}" + (f" entry seq {case.seq}" if case.seq is not None else "")
        assert failure["message"].startswith(where + ":")
    assert case.message in failure["message"]


def test_content_edit_detected_without_key(clean_records: list[Line], tmp_path: Path) -> None:
    """Hashes and links need no key: an edited entry fails even with --no-signatures."""
    case = next(t for t in TAMPERS if t.asset == "chain_entry_edited.jsonl")
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(case.path), ikm=None)
    _assert_refused(info.value, case, session_ids(clean_records))


def test_wrong_key_refused_at_first_signature(clean_records: list[Line]) -> None:
    """The first signed record is session A's own record (signed at its creation)."""
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(CLEAN_ASSET), ikm=WRONG_IKM)
    exc = info.value
    assert exc.integrity_reason is IntegrityReason.SIGNATURE_INVALID
    assert (exc.session_id, exc.seq) == (session_ids(clean_records)[0], None)
    assert exc.message.endswith(": session record signature does not verify")


def test_cli_wrong_key_refused(tmp_path: Path, clean_records: list[Line]) -> None:
    key = write_key(tmp_path / "wrong.key", WRONG_IKM)
    proc = _run_cli("verify", str(asset(CLEAN_ASSET)), "--key-file", str(key))
    assert proc.returncode == 1
    sid = session_ids(clean_records)[0]
    assert f"FAILED signature_invalid: session {sid}: session record signature does not verify" in (
        proc.stderr
    )


def test_cli_unreadable_key_is_bad_input(tmp_path: Path) -> None:
    """A missing key file is a configuration problem (exit 2), not an integrity failure."""
    proc = _run_cli("verify", str(asset(CLEAN_ASSET)), "--key-file", str(tmp_path / "none.key"))
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


def test_clean_asset_is_canonical_json_lines(clean_records: list[Line]) -> None:
    """The clean asset holds exactly the records the recipes start from (no stray lines)."""
    text = asset(CLEAN_ASSET).read_text(encoding="utf-8")
    assert text == dump_lines(clean_records)
    kinds = [r["kind"] for r in clean_records if isinstance(r, dict)]
    assert kinds == (
        ["session"] + ["entry"] * 6 + ["head", "session"] + ["entry"] * 3 + ["head", "manifest"]
    )
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())


# -- the export manifest ----------------------------------------------------------------------


def _case(asset_name: str) -> Tamper:
    return next(t for t in TAMPERS if t.asset == asset_name)


def _manifest_of(records: list[Line]) -> dict[str, Any]:
    (manifest,) = [r for r in records if isinstance(r, dict) and r["kind"] == "manifest"]
    return manifest


def test_manifest_lists_every_exported_head(clean_records: list[Line]) -> None:
    sid_a, sid_b = session_ids(clean_records)
    heads = {r["session_id"]: r for r in clean_records if r["kind"] == "head"}
    manifest = dict(_manifest_of(clean_records))
    signature = manifest.pop("signature")
    assert manifest == {
        "kind": "manifest",
        "sessions": [
            {"session_id": sid_a, "seq": 5, "chain_hash": heads[sid_a]["chain_hash"]},
            {"session_id": sid_b, "seq": 2, "chain_hash": heads[sid_b]["chain_hash"]},
        ],
    }
    assert isinstance(signature, dict)
    assert set(signature) == {"algorithm", "value", "key_id"}
    assert (signature["algorithm"], signature["key_id"]) == ("HMAC-SHA256", "warden")


@pytest.mark.parametrize("source", ["asset", "live"])
def test_manifest_signature_is_hmac_under_the_export_manifest_key(
    source: str, clean_records: list[Line], live: tuple[list[Line], list[str], Path]
) -> None:
    """Recomputed independently: HKDF-SHA256(IKM, no salt, info="warden:export-manifest"),
    HMAC-SHA256 over the JCS of the record without ``signature``, padded base64."""
    manifest = dict(_manifest_of(clean_records if source == "asset" else live[0]))
    signature = manifest.pop("signature")
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"warden:export-manifest"
    ).derive(TEST_IKM)
    # JCS of this record (ASCII strings, small ints, null) is sorted compact JSON.
    message = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    expected = base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
    assert isinstance(signature, dict)
    assert signature["value"] == expected


def test_store_records_verify_without_manifest(runtime: Runtime) -> None:
    """The database path (``warden verify --data-dir``) has no manifest and needs none."""
    sid_a, sid_b = produce_chain(runtime, audited=False)
    records = list(runtime.store.iter_records())
    assert [r["kind"] for r in records].count("manifest") == 0
    report = verify_records(records, ikm=TEST_IKM)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 11)
    assert report.session_signatures_checked == 2
    assert list(report.heads) == [sid_a, sid_b]
    report = verify_records(records)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 0)
    with pytest.raises(IntegrityError) as info:
        verify_records(records, ikm=TEST_IKM, require_manifest=True)
    assert info.value.integrity_reason is IntegrityReason.CHAIN_MISMATCH
    assert (info.value.session_id, info.value.seq) == (None, None)
    assert info.value.message == "no signed manifest at the end of the export (truncated file?)"


def test_export_records_end_with_the_manifest_and_nothing_else_changes(runtime: Runtime) -> None:
    produce_chain(runtime, audited=False)
    stored = list(runtime.store.iter_records())
    exported = list(export_records(runtime.store, TEST_IKM))
    assert exported[:-1] == stored
    assert exported[-1]["kind"] == "manifest"


def test_manifest_checked_when_present_even_if_not_required(clean_records: list[Line]) -> None:
    case = _case("chain_session_deleted.jsonl")
    with pytest.raises(IntegrityError) as info:
        verify_records(read_jsonl(asset(case.path)), ikm=TEST_IKM)
    _assert_refused(info.value, case, session_ids(clean_records))


@pytest.mark.parametrize(
    "name",
    [
        "chain_session_deleted.jsonl",
        "chain_last_session_deleted.jsonl",
        "chain_manifest_dropped.jsonl",
        "chain_manifest_head_edited.jsonl",
        "chain_manifest_extra_session.jsonl",
        "chain_records_after_manifest.jsonl",
    ],
)
def test_manifest_listing_checked_without_key(name: str, clean_records: list[Line]) -> None:
    """Which sessions and heads the manifest lists is checked even with --no-signatures."""
    case = _case(name)
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(case.path), ikm=None)
    _assert_refused(info.value, case, session_ids(clean_records))


def test_keyless_verification_accepts_a_consistently_rewritten_manifest(
    clean_records: list[Line],
) -> None:
    """The limit of --no-signatures: a session deleted *and* struck from the manifest is
    only caught by the manifest's signature (see the keyed case in TAMPERS)."""
    report = _verify_file(asset("ledger/chain_session_deleted_manifest_rewritten.jsonl"), ikm=None)
    assert (report.sessions, report.entries, report.signatures_checked) == (1, 6, 0)
    assert list(report.heads) == [session_ids(clean_records)[0]]


def test_session_without_entries_is_listed_and_its_deletion_detected(
    runtime: Runtime, tmp_path: Path, key_file: Path
) -> None:
    """A handshake-only session has no entries and no head record: the manifest lists it
    as seq -1 / null, and deleting its lone session record is detected."""
    from conftest import service_client

    sid_a, sid_b = produce_chain(runtime, audited=False)
    c = service_client(runtime, agent_id="agent-c", audited=False)
    assert "result" in c.hello()
    records: list[Line] = list(export_records(runtime.store, TEST_IKM))
    assert session_ids(records) == [sid_a, sid_b, c.session_id]
    manifest = _manifest_of(records)
    assert manifest["sessions"][-1] == {
        "session_id": c.session_id,
        "seq": -1,
        "chain_hash": None,
    }
    path = tmp_path / "with_empty.jsonl"
    path.write_text(dump_lines(records), encoding="utf-8")
    report = _verify_file(path)
    assert (report.sessions, report.entries, report.signatures_checked) == (3, 9, 12)

    hostile = [
        r
        for r in copy.deepcopy(records)
        if isinstance(r, dict) and r.get("session_id") != c.session_id
    ]
    assert len(hostile) == len(records) - 1
    path = tmp_path / "empty_session_deleted.jsonl"
    path.write_text(dump_lines(hostile), encoding="utf-8")
    with pytest.raises(IntegrityError) as info:
        _verify_file(path)
    exc = info.value
    assert exc.integrity_reason is IntegrityReason.CHAIN_MISMATCH
    assert (exc.session_id, exc.seq) == (c.session_id, None)
    assert exc.message == (
        f"session {c.session_id}: listed in the manifest but missing from the export"
    )
    proc = _run_cli("verify", str(path), "--key-file", str(key_file))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert (
        f"FAILED chain_mismatch: session {c.session_id}: listed in the manifest but missing "
        "from the export" in proc.stderr
    )


def test_empty_export_is_a_signed_manifest_of_nothing(runtime: Runtime) -> None:
    records = list(export_records(runtime.store, TEST_IKM))
    assert [r["kind"] for r in records] == ["manifest"]
    assert records[0]["sessions"] == []
    report = verify_records(records, ikm=TEST_IKM, require_manifest=True)
    assert (report.sessions, report.entries, report.signatures_checked) == (0, 0, 1)


# -- record shapes ----------------------------------------------------------------------------


def test_exported_record_members(clean_records: list[Line]) -> None:
    """Exactly the members records.py documents; nothing store-internal leaks out."""
    for rec in clean_records:
        assert isinstance(rec, dict)
        kind = rec["kind"]
        if kind == "session":
            assert set(rec) == {
                "kind", "session_id", "agent_id", "key_id", "created_at", "negotiated",
                "signature",
            }  # fmt: skip
            assert set(rec["negotiated"]) == {"server_hello"}
        elif kind == "entry":
            assert set(rec) <= {"kind", "session_id", "seq", "entry", "response", "request"}
        elif kind == "head":
            assert set(rec) == {"kind", "session_id", "seq", "chain_hash", "closed", "signature"}
            assert rec["closed"] is True  # both sessions ended with sessionEnd
        else:
            assert kind == "manifest"


def _sign_session_record(rec: dict[str, Any]) -> None:
    from warden.crypto.canonical import canonical_bytes
    from warden.crypto.hmac_keys import SessionKeys, hmac_sign

    unsigned = {k: v for k, v in rec.items() if k != "signature"}
    key = SessionKeys(TEST_IKM).key_for(rec["session_id"])
    rec["signature"] = {
        "algorithm": "HMAC-SHA256",
        "value": hmac_sign(key, canonical_bytes(unsigned)),
        "key_id": "warden",
    }


def test_pre_0002_export_shape_still_verifies() -> None:
    """chain_clean_v1.jsonl is an export written before session signatures and the head's
    ``closed``: its links, hashes, responses, heads and manifest still verify; only its
    unsigned session records fail a keyed verification (records.py)."""
    path = asset("ledger/chain_clean_v1.jsonl")
    records = list(read_jsonl(path))
    assert all("closed" not in r for r in records if r["kind"] == "head")
    assert all("signature" not in r for r in records if r["kind"] == "session")
    report = _verify_file(path, ikm=None)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 0)
    with pytest.raises(IntegrityError) as info:
        _verify_file(path)
    exc = info.value
    assert exc.integrity_reason is IntegrityReason.SIGNATURE_INVALID
    assert (exc.session_id, exc.seq) == (session_ids(list(records))[0], None)
    assert exc.message.endswith("session record signature missing")
    # Its heads (signed without ``closed``) verify once the sessions carry signatures.
    for rec in records:
        if rec["kind"] == "session":
            _sign_session_record(rec)
    report = verify_records(records, ikm=TEST_IKM, require_manifest=True)
    assert (report.signatures_checked, report.session_signatures_checked) == (12, 2)


def test_duplicate_key_reads_differently_in_lenient_parsers(clean_records: list[Line]) -> None:
    """Why export lines and stored rows are parsed strictly: the smuggled line of
    chain_duplicate_key.jsonl means the original verdict to json.loads (so the entry hash
    still matches) and allow to a first-key-wins reader such as SQLite's json_extract."""
    import sqlite3

    line = asset("ledger/chain_duplicate_key.jsonl").read_text(encoding="utf-8").splitlines()[4]
    lenient = json.loads(line)
    original = clean_records[4]
    assert isinstance(original, dict)
    assert lenient == original
    assert original["entry"]["verdict"]["decision"] != "allow"
    (first,) = (
        sqlite3.connect(":memory:")
        .execute("SELECT json_extract(?, '$.entry.verdict.decision')", (line,))
        .fetchone()
    )
    assert first == "allow"


def test_unreadable_export_file_is_bad_input(tmp_path: Path, key_file: Path) -> None:
    for path in (tmp_path / "missing.jsonl", tmp_path):
        proc = _run_cli("verify", str(path), "--key-file", str(key_file))
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        assert f"cannot read {path}" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_export_line_not_utf8_is_refused(tmp_path: Path, key_file: Path) -> None:
    lines = asset(CLEAN_ASSET).read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"kind"', b'"k\xffind"', 1)
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b"".join(lines))
    with pytest.raises(IntegrityError) as info:
        _verify_file(path)
    assert info.value.integrity_reason is IntegrityReason.RECORD_HASH_MISMATCH
    assert f"{path}:3: not UTF-8" in info.value.message
    proc = _run_cli("verify", str(path), "--key-file", str(key_file))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
