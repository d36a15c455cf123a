"""The fast path's calls in flight (decision 854: bare tasks instead of a task group's):
a call the client cancels is not answered and its upstream call is cancelled, a call
still running when the client's input ends is answered before the proxy exits, and the
proxy still exits cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_helpers import INIT, ROOT, agent_key_file, allow_all_bundle, verify

SERVER = [sys.executable, str(Path(__file__).with_name("fake_stdio_server.py"))]
BUNDLE = allow_all_bundle("in-flight")


def call(rid: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def session(tmp_path: Path, lines: list[dict[str, Any]], wait_for: Any) -> list[dict[str, Any]]:
    """Send the handshake, then ``lines`` without waiting, read until the answer to
    ``wait_for`` (None: read nothing more), end the input and return every answer."""
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(BUNDLE)
    command = [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
        str(policy), "--agent-key", str(agent_key_file(data)), "--upstream-timeout", "20",
        "--", *SERVER,
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=str(ROOT), env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    answers: list[dict[str, Any]] = []

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    try:
        send(INIT)
        answers.append(json.loads(proc.stdout.readline()))
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for message in lines:
            send(message)
        while wait_for is not None and all(a.get("id") != wait_for for a in answers):
            line = proc.stdout.readline()
            assert line, "the proxy closed its output"
            answers.append(json.loads(line))
        proc.stdin.close()
        rest = proc.stdout.read()  # until the proxy exits
        answers.extend(json.loads(line) for line in rest.splitlines() if line.strip())
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.stdout.close()
    checked = verify(data)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return answers


def test_a_cancelled_call_is_not_answered_and_the_next_one_is(tmp_path: Path) -> None:
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "changed my mind"},
    }
    answers = session(tmp_path, [call(5, "slow", {}), cancel, call(6, "echo", {"a": 1})], 6)
    ids = [a.get("id") for a in answers]
    assert 5 not in ids and ids.count(6) == 1
    six = next(a for a in answers if a.get("id") == 6)
    assert six["result"]["content"][0]["text"] == '{"a": 1}'


def test_calls_in_flight_when_the_input_ends_are_answered_first(tmp_path: Path) -> None:
    answers = session(tmp_path, [call(i, "echo", {"i": i}) for i in range(1, 4)], None)
    texts = {a["id"]: a["result"]["content"][0]["text"] for a in answers if a.get("id")}
    assert texts == {i: f'{{"i": {i}}}' for i in range(1, 4)}
