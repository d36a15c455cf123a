"""AgentDojo v1.2 replayed end to end: a real `warden serve`, the `warden replay agentdojo`
CLI over HTTP, then `warden verify` on the database. The decision counts are pinned: a
change in the bundle, the loader or the engine shows up here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, Server, start_server

from warden.replay.agentdojo_tasks import load_task_runs

#: suite → (tasks, calls, allow, warn, modify, ask, defer, deny, errors)
PINNED = {
    "banking": (25, 45, 24, 0, 0, 21, 0, 0, 0),
    "slack": (26, 111, 69, 19, 0, 23, 0, 0, 0),
    "travel": (27, 136, 127, 2, 0, 7, 0, 0, 0),
    "workspace": (54, 94, 74, 0, 0, 20, 0, 0, 0),
    "all": (132, 386, 294, 21, 0, 71, 0, 0, 0),
}


@pytest.fixture(scope="module")
def dojo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("dojo") / "srv", AGENTDOJO_POLICY)
    yield srv
    srv.stop()


def test_ground_truth_counts() -> None:
    runs = list(load_task_runs("v1.2"))
    assert sum(r.kind == "user" for r in runs) == 97
    assert sum(r.kind == "injection" for r in runs) == 35
    assert sum(len(r.steps) for r in runs) == 386


def test_replay_all_suites_then_verify(dojo_server: Server) -> None:
    data = dojo_server.data_dir
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "warden",
            "replay",
            "agentdojo",
            "--url",
            dojo_server.acs_url,
            "--key-file",
            str(data / "ikm.key"),
            "--data-dir",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] in PINNED and len(cells) == 10:
            rows[cells[0]] = tuple(int(c) for c in cells[1:])
    assert rows == PINNED, proc.stdout
    summary = re.search(
        r"OK \S+: (\d+) sessions, (\d+) entries, (\d+) signatures checked", proc.stdout
    )
    assert summary is not None, proc.stdout
    sessions, entries, signatures = map(int, summary.groups())
    # 132 sessions; per session: sessionStart, userMessage, sessionEnd + 2 per call.
    assert sessions == 132
    assert entries == 132 * 3 + 2 * 386
    assert signatures == entries + sessions  # every response and every signed head


def test_verify_detects_a_tampered_replay_database(dojo_server: Server, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    data = dojo_server.data_dir
    copy = tmp_path / "copy"
    copy.mkdir()
    # Checkpointed copy: the server may hold recent pages in its WAL.
    src = sqlite3.connect(data / "warden.db")
    dst = sqlite3.connect(copy / "warden.db")
    src.backup(dst)
    src.close()
    shutil.copy(data / "ikm.key", copy / "ikm.key")
    row = dst.execute(
        "SELECT session_id, seq, entry FROM entries WHERE step_type = 'steps/toolCallRequest' "
        'AND entry LIKE \'%"decision":"ask"%\' LIMIT 1'
    ).fetchone()
    assert row is not None
    dst.execute(
        "UPDATE entries SET entry = ? WHERE session_id = ? AND seq = ?",
        (row[2].replace('"decision":"ask"', '"decision":"allow"'), row[0], row[1]),
    )
    dst.commit()
    dst.close()
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "verify", "--data-dir", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert proc.returncode == 1
    assert "record_hash_mismatch" in proc.stderr
    assert f"session {row[0]} entry seq {row[1]}" in " ".join(proc.stderr.split())
