"""The proxy's ``tools/call`` fast path and its own stdio channel (decisions 650–651),
driven with raw JSON-RPC lines so that what reaches the client is seen byte for byte:
a call the SDK would refuse still gets the SDK's answer, nothing is answered before the
handshake as the SDK would not, and stdin that is a regular file still works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_helpers import MCP_BUNDLE, ROOT, agent_key_file, verify

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(rid: Any, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


TIME_CALL = {"name": "get_current_time", "arguments": {"timezone": "Europe/Paris"}}


def proxy_command(data_dir: Path) -> list[str]:
    key = agent_key_file(data_dir)
    return [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data_dir),
        "--policy", str(MCP_BUNDLE), "--agent-key", str(key), "--", *TIME_SERVER,
    ]  # fmt: skip


def run_proxy(data_dir: Path, lines: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Send ``lines`` to a proxy in front of the time server, each request after the
    previous one's answer (input that ends with calls in flight ends them), and collect
    every answer by id."""
    proc = subprocess.Popen(
        proxy_command(data_dir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, cwd=str(ROOT), env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[Any, dict[str, Any]] = {}
    try:
        for message in lines:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            while "id" in message and message["id"] not in answers:
                line = proc.stdout.readline()
                assert line, "the proxy closed its output"
                answer = json.loads(line)
                answers[answer.get("id")] = answer
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.stdout.close()
        if not proc.stdin.closed:
            proc.stdin.close()
    return answers


def test_calls_are_answered_with_the_upstream_result_and_the_sdks_errors(tmp_path: Path) -> None:
    data = tmp_path / "d"
    answers = run_proxy(
        data,
        [
            INIT,
            INITIALIZED,
            call(1, TIME_CALL),
            call(2, {"arguments": {}}),  # no name: the SDK's INVALID_PARAMS
            call("three", TIME_CALL),
            call(4, {"name": "no_such_tool", "arguments": {}}),  # denied by the bundle
        ],
    )
    assert answers[0]["result"]["serverInfo"]["name"] == "warden-mcp-proxy"
    first = answers[1]["result"]
    assert first["isError"] is False
    assert "Europe/Paris" in first["content"][0]["text"]
    warden = first["_meta"]["warden"]
    assert warden["decision"] == "allow" and warden["result"]["decision"] == "allow"
    assert warden["chain_hash"] != warden["result"]["chain_hash"]
    assert answers[2]["error"] == {
        "code": -32602,
        "message": "Invalid request parameters",
        "data": "",
    }
    assert answers["three"]["result"]["isError"] is False
    denied = answers[4]["result"]
    assert denied["isError"] is True and denied["_meta"]["warden"]["decision"] == "deny"
    assert verify(data).returncode == 0


def test_a_call_before_the_handshake_gets_the_sdks_refusal(tmp_path: Path) -> None:
    answers = run_proxy(tmp_path / "d", [call(1, TIME_CALL), INIT, call(2, TIME_CALL)])
    assert answers[1]["error"]["code"] == -32602
    assert answers[2]["result"]["isError"] is False


def test_stdin_from_a_regular_file_is_served_by_the_sdks_transport(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(INIT) + "\n")
    with source.open("rb") as stdin:
        done = subprocess.run(
            proxy_command(tmp_path / "d"), stdin=stdin, capture_output=True, timeout=120,
            cwd=str(ROOT), env=dict(os.environ), check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    answer = json.loads(done.stdout.decode().splitlines()[0])
    assert answer["id"] == 0 and answer["result"]["serverInfo"]["name"] == "warden-mcp-proxy"
