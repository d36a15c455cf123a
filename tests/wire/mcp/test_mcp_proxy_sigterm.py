"""`warden mcp-proxy` stopped with SIGTERM (what MCP clients, `kill`, systemd and
container runtimes send) shuts down as on Ctrl-C: the call in flight is cancelled, the
ACS session is closed with its `steps/sessionEnd` entry, the real server is stopped even
when it ignores the end of its input, and the shutdown checkpoint covers every entry.
Before, SIGTERM ended the process at once (exit -15) and left all four undone."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from mcp_helpers import INIT, ROOT, agent_key_file, allow_all_bundle, verify

SERVER = [sys.executable, str(Path(__file__).with_name("fake_stdio_server.py")), "stubborn"]
BUNDLE = allow_all_bundle("sigterm")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_closes_the_session_stops_the_server_and_signs(tmp_path: Path) -> None:
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(BUNDLE)
    stderr = tmp_path / "stderr.txt"
    command = [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
        str(policy), "--agent-key", str(agent_key_file(data)), "--upstream-timeout", "60",
        "--", *SERVER,
    ]  # fmt: skip
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            cwd=str(ROOT), env=dict(os.environ),
        )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    upstream = None
    try:
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        started = re.search(r"fake server started pid (\d+)", stderr.read_text())
        assert started, stderr.read_text()
        upstream = int(started.group(1))
        slow = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "slow", "arguments": {}}}  # fmt: skip
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        proc.stdin.write(json.dumps(slow).encode() + b"\n")
        proc.stdin.flush()
        db = data / "warden.db"
        deadline = time.monotonic() + 30
        while True:  # the call is in flight once its request step is chained
            with sqlite3.connect(db) as conn:
                n = conn.execute(
                    "SELECT COUNT(*) FROM entries WHERE step_type = 'protocols/MCP/tools/call'"
                ).fetchone()[0]
            if n:
                break
            assert time.monotonic() < deadline, "the call was never decided"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.stdout.close()
        proc.stdin.close()
    assert upstream is not None
    deadline = time.monotonic() + 10
    while _alive(upstream) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(upstream):
        os.kill(upstream, signal.SIGKILL)
        raise AssertionError("the real server outlived the proxy")
    with sqlite3.connect(data / "warden.db") as conn:
        steps = [r[0] for r in conn.execute("SELECT step_type FROM entries ORDER BY rowid")]
        covered = conn.execute("SELECT MAX(tree_size) FROM log_checkpoints").fetchone()[0]
        leaves = conn.execute(
            "SELECT COUNT(*) FROM (SELECT log_index FROM entries "
            "UNION ALL SELECT log_index FROM log_events)"
        ).fetchone()[0]
    assert steps[-1] == "steps/sessionEnd", steps
    assert covered == leaves
    checked = verify(data)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "warning" not in checked.stderr, checked.stderr
