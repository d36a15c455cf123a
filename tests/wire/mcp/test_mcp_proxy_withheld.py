"""A tool that ran but whose answer cannot pass — over the 1 MiB body limit, or no
valid ``CallToolResult`` — leaves a response step in the audit chain saying the answer
was withheld, not a request step alone (decision 295); the client gets an error."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_helpers import INIT, INITIALIZED, ROOT, agent_key_file, allow_all_bundle, verify

SERVER = [sys.executable, str(Path(__file__).with_name("fake_stdio_server.py"))]
BUNDLE = allow_all_bundle("withheld")


def _call(rid: int, name: str) -> bytes:
    msg = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
           "params": {"name": name, "arguments": {}}}  # fmt: skip
    return json.dumps(msg).encode() + b"\n"


def test_an_answer_that_cannot_pass_is_chained_as_withheld(tmp_path: Path) -> None:
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(BUNDLE)
    command = [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
        str(policy), "--agent-key", str(agent_key_file(data)), "--", *SERVER,
    ]  # fmt: skip
    lines = [json.dumps(INIT).encode() + b"\n", json.dumps(INITIALIZED).encode() + b"\n"]
    lines += [_call(1, "big"), _call(2, "bad"), _call(3, "echo")]
    done = subprocess.run(
        command, input=b"".join(lines), capture_output=True, cwd=str(ROOT),
        env=dict(os.environ), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    answers: dict[Any, dict[str, Any]] = {}
    for line in done.stdout.decode().splitlines():
        answer = json.loads(line)
        answers[answer.get("id")] = answer
    # Too large: withheld from the client as a tool error.
    assert answers[1]["result"]["isError"] is True
    # Not a CallToolResult: an error that says the server's answer was refused.
    assert answers[2]["error"]["code"] == -32603
    assert "answer was refused" in answers[2]["error"]["message"]
    assert answers[3]["result"]["isError"] is False
    with sqlite3.connect(data / "warden.db") as conn:
        # The stored request of each chained step: its params as hashed into the entry.
        stored = [
            r[0]
            for r in conn.execute(
                "SELECT request FROM entries WHERE step_type = 'protocols/MCP/tools/call' "
                "ORDER BY rowid"
            )
        ]
    # Each of the three calls has its request and a response step.
    assert len(stored) == 6, stored
    text = "\n".join(stored)
    assert "result withheld: Warden could not record the MCP server's answer" in text
    assert "the MCP server's answer was refused" in text
    checked = verify(data)
    assert checked.returncode == 0, checked.stdout + checked.stderr
