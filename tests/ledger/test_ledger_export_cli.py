"""``warden export`` writes what ``warden verify`` accepts, for all sessions or one.

The export is the store's records followed by one signed manifest; exporting needs the
key file (default ``<data-dir>/ikm.key``) to sign it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from conftest import TEST_IKM, write_key
from ledger_chains import produce_chain

from warden.ledger.export import export_records
from warden.runtime import Runtime

WRONG_IKM = bytes(range(1, 33))


def warden(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warden", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def verified(path: Path, key: Path) -> dict[str, object]:
    """``warden verify PATH --json``'s document (docs/cli-json.md), exit 0 asserted."""
    proc = warden("verify", path, "--key-file", key, "--json")
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


def _without_log(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the transparency log's one record (what export_records yields
    without ``log_record``)."""
    assert sum(r["kind"] == "log" for r in records) == 1
    return [r for r in records if r["kind"] != "log"]


def _heads(records: list[dict[str, object]]) -> dict[object, object]:
    return {r["session_id"]: r["chain_hash"] for r in records if r["kind"] == "head"}


def test_export_then_verify(runtime: Runtime, tmp_path: Path) -> None:
    sid_a, sid_b = produce_chain(runtime)
    stored = list(runtime.store.iter_records())
    expected = list(export_records(runtime.store, TEST_IKM))
    runtime.close()
    data = runtime.settings.data_dir
    out = tmp_path / "all.jsonl"

    proc = warden("export", "--data-dir", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    # Sessions A and B, and the two agents' registration chains (session, entry, head).
    assert len(expected) == len(stored) + 1 == 14 + 6
    # The CLI adds the transparency log's record before the manifest (issue 17).
    assert f"wrote 21 records to {out}" in proc.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records[-2]["kind"] == "log"
    records = _without_log(records)
    assert records == expected
    assert records[:-1] == stored
    ours = [r for r in records[:-1] if r["session_id"] in (sid_a, sid_b)]
    assert [r["kind"] for r in ours] == (
        ["session"] + ["entry"] * 6 + ["head", "session"] + ["entry"] * 3 + ["head"]
    )
    heads = _heads(stored)
    listed = [s for s in records[-1]["sessions"] if s["session_id"] in (sid_a, sid_b)]
    assert listed == [
        {"session_id": sid_a, "seq": 5, "chain_hash": heads[sid_a]},
        {"session_id": sid_b, "seq": 2, "chain_hash": heads[sid_b]},
    ]
    assert len(records[-1]["sessions"]) == 4

    doc = verified(out, data / "ikm.key")
    assert (doc["ok"], doc["source"], doc["sessions"], doc["entries"]) == (True, str(out), 4, 11)
    assert (doc["signatures_checked"], doc["heads"]) == (14, heads)

    one = tmp_path / "b.jsonl"
    proc = warden("export", "--data-dir", data, "--session", sid_b, "-o", one)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote 7 records to {one}" in proc.stderr
    records = [json.loads(line) for line in one.read_text(encoding="utf-8").splitlines()]
    assert records[-2]["kind"] == "log" and list(records[-2]["indexes"]) == [sid_b]
    records = _without_log(records)
    assert [r["kind"] for r in records] == [
        "session",
        "entry",
        "entry",
        "entry",
        "head",
        "manifest",
    ]
    assert {r["session_id"] for r in records[:-1]} == {sid_b}
    assert records[-1]["sessions"] == [{"session_id": sid_b, "seq": 2, "chain_hash": heads[sid_b]}]
    doc = verified(one, data / "ikm.key")
    assert (doc["sessions"], doc["entries"], doc["signatures_checked"]) == (1, 3, 5)
    assert doc["heads"] == {sid_b: heads[sid_b]}


def test_session_export_cannot_pass_for_the_whole_export(runtime: Runtime, tmp_path: Path) -> None:
    """Session A's records spliced in front of a ``--session B`` export: the manifest only
    lists B, so A is refused."""
    sid_a, sid_b = produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    full, one = tmp_path / "all.jsonl", tmp_path / "b.jsonl"
    assert warden("export", "--data-dir", data, "-o", full).returncode == 0
    assert warden("export", "--data-dir", data, "--session", sid_b, "-o", one).returncode == 0
    a_lines = [
        ln for ln in full.read_text().splitlines() if json.loads(ln).get("session_id") == sid_a
    ]
    assert len(a_lines) == 8
    spliced = tmp_path / "spliced.jsonl"
    spliced.write_text("\n".join(a_lines) + "\n" + one.read_text())
    proc = warden("verify", spliced, "--key-file", data / "ikm.key")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"FAILED chain_mismatch: session {sid_a}: in the export but not in the manifest" in (
        proc.stderr
    )
    assert proc.stdout == ""
    proc = warden("verify", spliced, "--key-file", data / "ikm.key", "--json")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert json.loads(proc.stdout)["failure"] == {
        "reason": "chain_mismatch",
        "message": f"session {sid_a}: in the export but not in the manifest",
        "session_id": sid_a,
        "seq": None,
    }


def test_export_to_stdout(runtime: Runtime) -> None:
    produce_chain(runtime)
    expected = list(export_records(runtime.store, TEST_IKM))
    runtime.close()
    proc = warden("export", "--data-dir", runtime.settings.data_dir)
    assert proc.returncode == 0, proc.stderr
    assert _without_log([json.loads(line) for line in proc.stdout.splitlines()]) == expected
    assert proc.stderr == ""


def test_export_with_explicit_key_file(runtime: Runtime, tmp_path: Path) -> None:
    """``--key-file`` (and WARDEN_KEY_FILE) replace the default <data-dir>/ikm.key."""
    produce_chain(runtime)
    expected = list(export_records(runtime.store, TEST_IKM))
    runtime.close()
    data = runtime.settings.data_dir
    key = write_key(tmp_path / "elsewhere" / "k.key")
    (data / "ikm.key").unlink()
    proc = warden("export", "--data-dir", data, "--key-file", key)
    assert proc.returncode == 0, proc.stderr
    assert _without_log([json.loads(line) for line in proc.stdout.splitlines()]) == expected
    proc = warden("export", "--data-dir", data, WARDEN_KEY_FILE=str(key))
    assert proc.returncode == 0, proc.stderr
    assert _without_log([json.loads(line) for line in proc.stdout.splitlines()]) == expected


def test_export_without_database(tmp_path: Path) -> None:
    write_key(tmp_path / "empty" / "ikm.key")
    proc = warden("export", "--data-dir", tmp_path / "empty")
    assert proc.returncode == 2
    assert f"error: no database at sqlite:///{tmp_path / 'empty' / 'warden.db'}" in proc.stderr
    assert proc.stdout == ""


def test_export_without_key_file_is_bad_input(runtime: Runtime, tmp_path: Path) -> None:
    """No key, no export: exit 2 naming the key file, and no (partial) output file."""
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    key = data / "ikm.key"
    key.unlink()
    out = tmp_path / "out.jsonl"
    proc = warden("export", "--data-dir", data, "--out", out)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"error: key file {key} does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()

    missing = tmp_path / "none.key"
    proc = warden("export", "--data-dir", data, "--key-file", missing)
    assert proc.returncode == 2
    assert f"error: key file {missing} does not exist" in proc.stderr
    assert proc.stdout == ""


def test_export_with_unreadable_key_file_is_bad_input(runtime: Runtime, tmp_path: Path) -> None:
    """A key path that cannot be read (here a directory; also a file this user may not
    read) is a configuration error (exit 2), not a crash (a traceback exits 1, which
    would read as 'integrity failure found')."""
    produce_chain(runtime)
    runtime.close()
    key = tmp_path / "dir.key"
    key.mkdir(mode=0o700)
    key.chmod(0o700)
    proc = warden("export", "--data-dir", runtime.settings.data_dir, "--key-file", key)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"error: key file {key} cannot be read: Is a directory" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_export_with_loose_key_file_is_bad_input(runtime: Runtime) -> None:
    produce_chain(runtime)
    runtime.close()
    key = runtime.settings.data_dir / "ikm.key"
    key.chmod(0o644)
    proc = warden("export", "--data-dir", runtime.settings.data_dir)
    assert proc.returncode == 2
    assert f"error: key file {key} is accessible by group/others (mode 0o644)" in proc.stderr
    assert proc.stdout == ""


def test_export_signed_with_another_key_is_refused(runtime: Runtime, tmp_path: Path) -> None:
    """The manifest binds the export to the key it was signed with: exported with a
    different IKM, every head still verifies but the manifest does not."""
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    wrong = write_key(tmp_path / "wrong.key", WRONG_IKM)
    out = tmp_path / "wrong.jsonl"
    assert warden("export", "--data-dir", data, "--key-file", wrong, "-o", out).returncode == 0
    proc = warden("verify", out, "--key-file", data / "ikm.key")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "FAILED signature_invalid: manifest signature does not verify" in proc.stderr
    assert proc.stdout == ""


def test_verify_no_signatures_needs_no_key(runtime: Runtime) -> None:
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    (data / "ikm.key").unlink()
    proc = warden("verify", "--data-dir", data, "--no-signatures")
    assert proc.returncode == 0, proc.stderr
    # 9 entries of the two sessions and the two agents' registration entries
    assert "11 entries, 0 signatures checked (signatures not checked: --no-signatures)" in (
        proc.stdout
    )
    doc = json.loads(warden("verify", "--data-dir", data, "--no-signatures", "--json").stdout)
    assert (doc["signatures"], doc["entries"], doc["signatures_checked"]) == (False, 11, 0)


def test_verify_database_needs_no_manifest(runtime: Runtime) -> None:
    """``warden verify --data-dir`` walks the store's records: no manifest there."""
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    proc = warden("verify", "--data-dir", data, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # The two sessions and the two agents' registration chains (one entry, one head each).
    assert (doc["source"], doc["sessions"], doc["entries"]) == (str(data / "warden.db"), 4, 11)
    assert doc["signatures_checked"] == 13


def test_export_to_a_path_it_cannot_write_is_bad_input(runtime: Runtime, tmp_path: Path) -> None:
    """A missing directory or a directory as --out: a one-line error, exit 2, no traceback
    (and, with --json, nothing on stdout)."""
    produce_chain(runtime)
    runtime.close()
    for out in (tmp_path / "no" / "such" / "dir" / "x.jsonl", tmp_path):
        for extra in ((), ("--json",)):
            proc = warden("export", "--data-dir", runtime.settings.data_dir, "-o", out, *extra)
            assert proc.returncode == 2, proc.stderr
            assert "cannot write" in proc.stderr and "Traceback" not in proc.stderr
            assert proc.stdout == ""


def test_export_to_a_full_device_is_bad_input(runtime: Runtime) -> None:
    """Before: a traceback (OSError ENOSPC at the write). Now the unwritable path's
    one-line error, exit 2, nothing on stdout; /dev/full itself is left alone."""
    produce_chain(runtime)
    runtime.close()
    for extra in ((), ("--json",)):
        proc = warden("export", "--data-dir", runtime.settings.data_dir, "-o", "/dev/full", *extra)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == "error: cannot write /dev/full: No space left on device\n"
        assert proc.stdout == ""
    assert Path("/dev/full").exists()


def test_a_failed_write_removes_the_partial_export(
    runtime: Runtime, tmp_path: Path, monkeypatch: Any
) -> None:
    """A disk that fills up after some records: exit 2 and no partial file left behind."""
    import errno

    from typer.testing import CliRunner

    from warden.cli import app

    produce_chain(runtime)
    runtime.close()
    out = tmp_path / "x.jsonl"
    real_open = Path.open

    class Filling:
        def __init__(self, fh: Any) -> None:
            self.fh, self.writes = fh, 0

        def write(self, text: str) -> int:
            self.writes += 1
            if self.writes > 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n: int = self.fh.write(text)
            self.fh.flush()
            return n

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fh, name)

    def opening(self: Path, *args: Any, **kwargs: Any) -> Any:
        fh = real_open(self, *args, **kwargs)
        return Filling(fh) if self == out else fh

    monkeypatch.setattr(Path, "open", opening)
    result = CliRunner().invoke(
        app, ["export", "--data-dir", str(runtime.settings.data_dir), "-o", str(out), "--json"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot write" in result.stderr and "No space left on device" in result.stderr
    assert result.stdout == ""
    assert not out.exists()


def test_an_unknown_session_is_exit_1_and_writes_nothing(runtime: Runtime, tmp_path: Path) -> None:
    """Decision 994: like every other unknown id, not an empty export that verifies."""
    produce_chain(runtime)
    runtime.close()
    data = runtime.settings.data_dir
    out = tmp_path / "none.jsonl"
    for extra in ((), ("--json",)):
        proc = warden("export", "--data-dir", data, "--session", "no-such", "-o", out, *extra)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == "error: no session 'no-such' in the database\n"
        assert not out.exists()


def test_an_empty_session_id_is_a_usage_error(runtime: Runtime, tmp_path: Path) -> None:
    """Before: `error: no session  in the database`, exit 1. An empty or blank id names
    no session at all: exit 2, the id quoted so its spaces show, nothing written."""
    produce_chain(runtime)
    runtime.close()
    out = tmp_path / "none.jsonl"
    for sid in ("", "  "):
        for extra in ((), ("--json",)):
            proc = warden(
                "export", "--data-dir", runtime.settings.data_dir, "--session", sid, "-o", out,
                *extra,
            )  # fmt: skip
            assert (proc.returncode, proc.stdout) == (2, "")
            assert proc.stderr == f"error: --session is empty ({sid!r})\n"
            assert not out.exists()
    proc = warden("export", "--data-dir", runtime.settings.data_dir, "--session", " x ", "-o", out)
    assert (proc.returncode, proc.stderr) == (1, "error: no session ' x ' in the database\n")


def test_a_session_uuid_is_found_in_any_case(runtime: Runtime, tmp_path: Path) -> None:
    """Decision 1036: a UUID is case-insensitive. Before, `--session <UPPER>` of a session
    stored lower-case (and the reverse) was exit 1, "no session"."""
    from conftest import service_client

    sid_a, _ = produce_chain(runtime)
    upper = str(uuid.uuid4()).upper()
    c = service_client(runtime, agent_id="agent-u", session_id=upper)
    assert "result" in c.hello()
    # The same UUID stored in two spellings (two sessions to the store): ambiguous.
    twin = str(uuid.uuid4())
    while twin[:8].isdigit():  # the mixed spelling below must differ from both (1 in 43)
        twin = str(uuid.uuid4())
    for spelling in (twin, twin.upper()):
        assert "result" in service_client(runtime, agent_id="agent-t", session_id=spelling).hello()
    runtime.close()
    data = runtime.settings.data_dir
    for typed, stored in ((sid_a.upper(), sid_a), (upper.lower(), upper), (sid_a, sid_a)):
        out = tmp_path / f"{typed}.jsonl"
        proc = warden("export", "--data-dir", data, "--session", typed, "-o", out, "--json")
        assert proc.returncode == 0, proc.stderr
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert {r["session_id"] for r in records if r["kind"] == "session"} == {stored}
        assert verified(out, data / "ikm.key")["ok"] is True
    mixed = twin[:8].upper() + twin[8:]
    out = tmp_path / "twin.jsonl"
    proc = warden("export", "--data-dir", data, "--session", mixed, "-o", out)
    assert proc.returncode == 2, proc.stderr
    assert (
        "several spellings" in proc.stderr and twin in proc.stderr and twin.upper() in proc.stderr
    )
    assert proc.stdout == "" and not out.exists()
    # Not a UUID: still only its exact spelling.
    proc = warden("export", "--data-dir", data, "--session", "NO-SUCH", "-o", out)
    assert (proc.returncode, proc.stderr) == (1, "error: no session 'NO-SUCH' in the database\n")
