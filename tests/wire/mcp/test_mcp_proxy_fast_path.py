"""The proxy's ``tools/call`` fast path and its own stdio channel (decisions 650–651),
driven with raw JSON-RPC lines so that what reaches the client is seen byte for byte:
a call the SDK would refuse still gets the SDK's answer, nothing is answered before the
handshake as the SDK would not, and stdin that is a regular file still works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_helpers import INIT, INITIALIZED, MCP_BUNDLE, ROOT, agent_key_file, verify

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


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


def test_stdin_from_a_regular_file_is_served_too(tmp_path: Path) -> None:
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


#: Lines the proxy cannot accept, each with the error code and id it is answered
#: with (decisions 690–692); ``None`` as the code: a notification, not answered.
DEEP = b'{"a":' + b"[" * 250 + b"]" * 250 + b"}"
BAD_LINES: list[tuple[bytes, int | None, Any]] = [
    (b"{not json}", -32700, None),
    (b"\xff\xfe garbage", -32700, None),
    (b'{"jsonrpc":"2.0","id":41,"method":"ping","params":{"a":"\xff"}}', -32700, None),
    (b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":{"timezone":"\\ud800"}}}', -32700, None),
    (b'{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":' + DEEP + b"}}", -32700, None),
    (b"{}", -32600, None),
    (b'{"jsonrpc":"2.0","id":5}', -32600, 5),
    (b'{"id":7,"method":"tools/list"}', -32600, 7),
    (b'"hello"', -32600, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', -32600, None),
    # Not strict JSON (decisions 760–762): -32700 with the id when it can be read.
    (b'{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":{"timezone":"UTC","n":NaN}}}', -32700, 23),
    (b'{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":{"timezone":"UTC","n":1e400}}}', -32700, 24),
    (b'{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"delete_file",'
     b'"arguments":{"timezone":"UTC"},"name":"get_current_time"}}', -32700, 25),
    (b'{"jsonrpc":"2.0","id":26,"method":"ping","params":{"n":-Infinity}}', -32700, 26),
    (b"[" * 201 + b"]" * 201, -32700, None),
    (b'{"jsonrpc":"2.0","id":27,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":{"timezone":"UTC","n":123456789012345678901234567890}}}', -32602, 27),
    # A request that also carries a result or an error (decision 856): -32602, its id;
    # such a notification is only logged.
    (b'{"jsonrpc":"2.0","id":28,"method":"tools/call","params":{"name":"get_current_time",'
     b'"arguments":{"timezone":"UTC"}},"result":{}}', -32602, 28),
    (b'{"jsonrpc":"2.0","id":29,"method":"ping","error":{"code":1,"message":"x"}}', -32602, 29),
    (b'{"jsonrpc":"2.0","method":"notifications/initialized","result":{}}', None, None),
    (b'{"method":"notifications/initialized"}', None, None),
]  # fmt: skip


def exchange(data_dir: Path, raw: list[bytes], last_id: Any) -> tuple[list[Any], str]:
    """Handshake with a proxy, then send ``raw`` lines at once and read answers until
    the one to ``last_id``; return the answers after the handshake's, in order, and
    the proxy's stderr."""
    proc = subprocess.Popen(
        proxy_command(data_dir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=str(ROOT), env=dict(os.environ),
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        handshake = json.loads(proc.stdout.readline())
        assert handshake["id"] == 0 and "result" in handshake
        proc.stdin.write(
            b"".join(line + b"\n" for line in [json.dumps(INITIALIZED).encode(), *raw])
        )
        proc.stdin.flush()
        answers: list[Any] = []
        while not answers or not (
            isinstance(answers[-1], dict) and answers[-1].get("id") == last_id
        ):
            line = proc.stdout.readline()
            assert line, "the proxy closed its output"
            answers.append(json.loads(line))
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode(errors="replace")
    return answers, err.decode(errors="replace")


def test_lines_the_proxy_cannot_accept_are_answered_and_go_no_further(tmp_path: Path) -> None:
    data = tmp_path / "d"
    batch = b'[{"jsonrpc":"2.0","id":996,"method":"ping"},{"jsonrpc":"2.0","method":"x"},1]'
    before = [b"", b"   "]  # blank lines carry no message: ignored
    raw = [
        *before, *(line for line, _, _ in BAD_LINES), batch, b"[]",
        json.dumps(call(9, TIME_CALL)).encode(),
    ]  # fmt: skip
    answers, err = exchange(data, raw, 9)
    refusals, last = answers[:-1], answers[-1]
    expected = [(code, rid) for _, code, rid in BAD_LINES if code is not None]
    assert [(a["error"]["code"], a["id"]) for a in refusals[: len(expected)]] == expected
    for answer in refusals[: len(expected)]:
        assert answer["jsonrpc"] == "2.0" and set(answer) == {"jsonrpc", "id", "error"}
    # A batch: one error per element that is not a notification, as an array.
    batch_answer, empty_batch = refusals[len(expected) :]
    assert [(a["error"]["code"], a["id"]) for a in batch_answer] == [(-32600, 996), (-32600, None)]
    assert (empty_batch["error"]["code"], empty_batch["id"]) == (-32600, None)
    # The call after them is governed and answered as ever.
    assert last["id"] == 9 and last["result"]["isError"] is False
    assert last["result"]["_meta"]["warden"]["decision"] == "allow"
    # Each refusal is logged at WARNING, the unanswered notification too.
    assert err.count("refused a client line") == len(BAD_LINES) + 2
    assert "a notification, not answered" in err
    # Nothing of them was recorded: the chains verify and hold as many entries as a
    # connection that made only the handshake and the call.
    checked = verify(data)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    baseline, _ = exchange(tmp_path / "only-the-call", [json.dumps(call(9, TIME_CALL)).encode()], 9)
    assert baseline[-1]["result"]["isError"] is False
    assert entries(checked.stdout) == entries(verify(tmp_path / "only-the-call").stdout)


def entries(verified: str) -> int:
    """The entry count ``warden verify`` reports for the data directory's store."""
    found = re.search(r"(\d+) entries", verified)
    assert found, verified
    return int(found.group(1))


def test_a_bad_line_on_a_regular_file_stdin_is_answered_as_on_a_pipe(tmp_path: Path) -> None:
    """Decision 1200: a regular-file stdin was read by the SDK's own transport, which
    took an id of ``1.5``, ``null``, ``true`` or an object for a notification (no
    answer, no log line) and passed ``2**64`` and ``1e400`` on to be denied as
    ``jcs_domain``. It is now read by the channel, so every line is parsed strictly and
    refused as on a pipe; a batch's errors go out as one array."""
    call = (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call",'
        b'"params":{"name":"t","arguments":{"n":%s}}}'
    )
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        json.dumps(INIT).encode() + b"\n{not json}\n"
        + b'{"jsonrpc":"2.0","id":5}\n[{"jsonrpc":"2.0","id":996,"method":"ping"}]\n'
        + b"".join(
            b'{"jsonrpc":"2.0","id":%s,"method":"tools/list"}\n' % rid
            for rid in (b'{"a":1}', b"true", b"1.5", b"null")
        )
        + call % (7, b"12345678901234567890") + b"\n" + call % (8, b"1e400") + b"\n"
    )  # fmt: skip
    with source.open("rb") as stdin:
        done = subprocess.run(
            proxy_command(tmp_path / "d"), stdin=stdin, capture_output=True, timeout=120,
            cwd=str(ROOT), env=dict(os.environ), check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]
    # The handshake's answer may come before or after the refusals (they are answered
    # as they are read); the refusals come in the order of their lines.
    assert [a["id"] for a in answers if "result" in a] == [0]
    refusals = [
        [(e["id"], e["error"]["code"]) for e in a] if isinstance(a, list)
        else (a["id"], a["error"]["code"])
        for a in answers if "result" not in a
    ]  # fmt: skip
    assert refusals == [
        (None, -32700), (5, -32600), [(996, -32600)], *[(None, -32600)] * 4,
        (7, -32602), (8, -32700),
    ]  # fmt: skip
    by_id = {a["id"]: a for a in answers if isinstance(a, dict) and a["id"] is not None}
    assert "/params/arguments/n is outside the RFC 8785" in by_id[7]["error"]["message"]
    assert "1e400 overflows a double" in by_id[8]["error"]["message"]
    assert done.stderr.decode().count("refused a client line") == 9
    assert "jcs_domain" not in done.stdout.decode() + done.stderr.decode()
