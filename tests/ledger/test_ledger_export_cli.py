"""``warden export`` writes what ``warden verify`` accepts, for all sessions or one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ledger_chains import produce_chain

from warden.runtime import Runtime


def warden(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )


def test_export_then_verify(runtime: Runtime, tmp_path: Path) -> None:
    sid_a, sid_b = produce_chain(runtime)
    expected = list(runtime.store.iter_records())
    runtime.close()
    data = runtime.settings.data_dir
    out = tmp_path / "all.jsonl"

    proc = warden("export", "--data-dir", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {len(expected)} records to {out}" in proc.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == expected

    proc = warden("verify", out, "--key-file", data / "ikm.key")
    assert proc.returncode == 0, proc.stderr
    assert "2 sessions, 9 entries, 11 signatures checked" in proc.stdout

    one = tmp_path / "b.jsonl"
    proc = warden("export", "--data-dir", data, "--session", sid_b, "-o", one)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in one.read_text(encoding="utf-8").splitlines()]
    assert {r["session_id"] for r in records} == {sid_b}
    assert [r["kind"] for r in records] == ["session", "entry", "entry", "entry", "head"]
    proc = warden("verify", one, "--key-file", data / "ikm.key")
    assert proc.returncode == 0, proc.stderr
    assert "1 sessions, 3 entries, 4 signatures checked" in proc.stdout
    assert sid_a not in proc.stdout


def test_export_to_stdout(runtime: Runtime) -> None:
    produce_chain(runtime)
    expected = list(runtime.store.iter_records())
    runtime.close()
    proc = warden("export", "--data-dir", runtime.settings.data_dir)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()] == expected


def test_export_without_database(tmp_path: Path) -> None:
    proc = warden("export", "--data-dir", tmp_path / "empty")
    assert proc.returncode == 2
    assert "no database at" in proc.stderr


def test_verify_no_signatures_needs_no_key(runtime: Runtime) -> None:
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    (data / "ikm.key").unlink()
    proc = warden("verify", "--data-dir", data, "--no-signatures")
    assert proc.returncode == 0, proc.stderr
    assert "9 entries, 0 signatures checked (signatures not checked: --no-signatures)" in (
        proc.stdout
    )
