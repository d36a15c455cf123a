"""`warden mcp-proxy` on a data directory that was never served (no demo agent yet):
one line that says how to get an agent key, exit status 2, and nothing created. A fresh
user got only "agent key file … does not exist"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mcp_helpers import ROOT


def test_a_fresh_data_dir_says_how_to_get_an_agent_key(tmp_path: Path) -> None:
    data = tmp_path / "never-served"
    done = subprocess.run(
        [sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--",
         sys.executable, "-c", "pass"],
        capture_output=True, text=True, cwd=str(ROOT), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"agent key file {data / 'agents' / 'demo-agent.key'} does not exist" in said
    assert "--agent-key FILE" in said and "warden agents add" in said
    assert f"warden serve --data-dir {data}" in said
    assert done.stdout == ""  # the MCP channel stays clean
    assert not data.exists()
