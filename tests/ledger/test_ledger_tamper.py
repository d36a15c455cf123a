"""A tampered audit export is refused at exactly the broken record, with the right reason.

Each hostile case is a named asset (tests/assets/ledger/chain_*.jsonl, a recipe from
ledger_chains.py applied to chain_clean.jsonl). Every case is checked three ways: the
committed asset through ``verify_records``, the same recipe applied to a chain produced
now by a live in-process Warden, and the asset through ``python -m warden verify``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_IKM, asset, write_key
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
from warden.ledger.verify import VerifyReport, read_jsonl, verify_records
from warden.runtime import Runtime

WRONG_IKM = bytes(range(1, 33))


def _verify_file(path: Path, ikm: bytes | None = TEST_IKM) -> VerifyReport:
    return verify_records(read_jsonl(path), ikm=ikm)


def _assert_refused(exc: IntegrityError, case: Tamper, sids: list[str]) -> None:
    assert exc.integrity_reason is case.reason, exc.diagnostics()
    assert exc.reason == case.reason.value
    expected_sid = sids[case.session] if case.session is not None else None
    assert exc.session_id == expected_sid, exc.diagnostics()
    assert exc.seq == case.seq, exc.diagnostics()
    assert case.message in exc.message, exc.message


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


@pytest.fixture(scope="module")
def clean_records() -> list[Line]:
    return list(load_records(asset(CLEAN_ASSET)))


@pytest.fixture
def live(runtime: Runtime, tmp_path: Path) -> tuple[list[Line], list[str], Path]:
    """A chain produced now, exported with Store.iter_records to JSONL."""
    sid_a, sid_b = produce_chain(runtime)
    records: list[Line] = list(runtime.store.iter_records())
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
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 11)
    assert report.heads == heads


def test_live_chain_verifies(live: tuple[list[Line], list[str], Path]) -> None:
    records, sids, path = live
    report = _verify_file(path)
    assert (report.sessions, report.entries, report.signatures_checked) == (2, 9, 11)
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
    proc = _run_cli("verify", str(path), "--key-file", str(key_file))
    assert proc.returncode == 0, proc.stderr
    assert f"OK {path}: 2 sessions, 9 entries, 11 signatures checked" in proc.stdout
    assert all(sid in proc.stdout for sid in sids)


def test_cli_verifies_clean_asset(key_file: Path) -> None:
    proc = _run_cli("verify", str(asset(CLEAN_ASSET)), "--key-file", str(key_file))
    assert proc.returncode == 0, proc.stderr
    assert "2 sessions, 9 entries, 11 signatures checked" in proc.stdout


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
    proc = _run_cli("verify", str(asset(case.path)), "--key-file", str(key_file))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"FAILED {case.reason.value}: " in proc.stderr
    if case.session is not None:
        where = f"session {session_ids(clean_records)[case.session]}"
        if case.seq is not None:
            where += f" entry seq {case.seq}"
        assert where + ":" in proc.stderr
    assert case.message in proc.stderr
    assert "OK" not in proc.stdout


def test_content_edit_detected_without_key(clean_records: list[Line], tmp_path: Path) -> None:
    """Hashes and links need no key: an edited entry fails even with --no-signatures."""
    case = next(t for t in TAMPERS if t.asset == "chain_entry_edited.jsonl")
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(case.path), ikm=None)
    _assert_refused(info.value, case, session_ids(clean_records))


def test_wrong_key_refused_at_first_signature(clean_records: list[Line]) -> None:
    with pytest.raises(IntegrityError) as info:
        _verify_file(asset(CLEAN_ASSET), ikm=WRONG_IKM)
    exc = info.value
    assert exc.integrity_reason is IntegrityReason.SIGNATURE_INVALID
    assert (exc.session_id, exc.seq) == (session_ids(clean_records)[0], 0)


def test_cli_wrong_key_refused(tmp_path: Path) -> None:
    key = write_key(tmp_path / "wrong.key", WRONG_IKM)
    proc = _run_cli("verify", str(asset(CLEAN_ASSET)), "--key-file", str(key))
    assert proc.returncode == 1
    assert "FAILED signature_invalid: " in proc.stderr
    assert "entry seq 0: signature does not verify" in proc.stderr


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
    assert kinds == ["session"] + ["entry"] * 6 + ["head", "session"] + ["entry"] * 3 + ["head"]
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
