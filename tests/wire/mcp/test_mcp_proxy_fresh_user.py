"""What a fresh user found in ``warden mcp-proxy`` (decisions 900-904), driven with raw
lines through a real proxy in front of ``fake_stdio_server.py``: a line longer than
``--max-line-bytes`` from either side is refused without being held whole and the
proxy goes on; a call before ``initialize`` is told so; an answer that is not strict
JSON is refused, not changed, and its response step is still chained."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import INIT, INITIALIZED, ROOT, agent_key_file, allow_all_bundle, verify

from warden.transport.stdio_channel import TooLong
from warden.transport.upstream_stdio import _refused_answer

SERVER = [sys.executable, str(Path(__file__).with_name("fake_stdio_server.py"))]
LIMIT = 1 << 20


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _call(rid: int, name: str, arguments: dict[str, Any] | None = None) -> bytes:
    params = {"name": name, "arguments": arguments or {}}
    return _line({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def _run(
    tmp_path: Path, lines: list[bytes], *, stderr: list[str] | None = None
) -> tuple[dict[Any, Any], Path]:
    """Every answer by id (a list of them under ``None``) and the data directory
    (``stderr``: the proxy's log is appended to it)."""
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(allow_all_bundle("fresh-user"))
    command = [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
        str(policy), "--agent-key", str(agent_key_file(data)), "--max-line-bytes", str(LIMIT),
        "--", *SERVER,
    ]  # fmt: skip
    done = subprocess.run(
        command, input=b"".join(lines), capture_output=True, cwd=str(ROOT),
        env=dict(os.environ), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    if stderr is not None:
        stderr.append(done.stderr.decode())
    answers: dict[Any, Any] = {None: []}
    for raw in done.stdout.decode().splitlines():
        answer = json.loads(raw)
        if answer.get("id") is None:
            answers[None].append(answer)
            continue
        assert answer["id"] not in answers, answer
        answers[answer["id"]] = answer
    return answers, data


def _stored_tool_calls(data: Path) -> list[str]:
    with sqlite3.connect(data / "warden.db") as conn:
        rows = conn.execute(
            "SELECT request FROM entries WHERE step_type = 'protocols/MCP/tools/call' "
            "ORDER BY rowid"
        )
        return [r[0] for r in rows]


def test_an_over_long_line_from_either_side_is_refused_and_the_proxy_goes_on(
    tmp_path: Path,
) -> None:
    handshake = [_line(INIT), _line(INITIALIZED)]
    # A valid call, 3 MiB long (read in many chunks), and one just over the limit that
    # arrives with the next line in the same read.
    huge = _call(1, "echo", {"text": "x" * (3 << 20)})
    just_over = _call(2, "echo", {"text": "y" * LIMIT})
    answers, data = _run(
        tmp_path, [*handshake, huge, just_over, _call(3, "echo", {"text": "ok"}), _call(4, "big")]
    )
    # Both over-long lines: one answer each, id null, naming the limit.
    sizes = []
    for refused in answers[None]:
        assert refused["error"]["code"] == -32600
        message = refused["error"]["message"]
        assert f"limit of {LIMIT} bytes" in message and "--max-line-bytes" in message
        sizes.append(int(message.split("a line of ")[1].split()[0]))
    assert sizes == [len(huge) - 1, len(just_over) - 1]
    # Exactly the handshake, the two refusals (id null) and calls 3 and 4 were answered:
    # neither over-long call got an answer of its own.
    assert sorted(answers, key=str) == sorted([None, INIT["id"], 3, 4], key=str)
    assert answers[3]["result"]["content"][0]["text"] == '{"text": "ok"}'
    # The server's 2 MiB answer is over the limit too: the refused-answer error, and the
    # call's response step is chained (the tool ran).
    assert answers[4]["error"]["code"] == -32603
    assert answers[4]["error"]["message"].startswith("the MCP server's answer was refused: ")
    assert f"limit of {LIMIT} bytes" in answers[4]["error"]["message"]
    assert answers[4]["error"]["data"]["warden"]["result"]["decision"] == "allow"
    stored = _stored_tool_calls(data)
    assert len(stored) == 4  # calls 3 and 4, a request and a response step each
    assert "the MCP server's answer was refused" in "\n".join(stored)
    assert verify(data).returncode == 0


def test_the_id_of_an_over_long_answer_is_read_on_either_end() -> None:
    # Python's json.dumps writes the id first; the TypeScript SDK writes it last.
    first = TooLong(9, 5, b'{"jsonrpc": "2.0", "id": "warden-3", "result": {"content": [', b"")
    last = TooLong(9, 5, b'{"result":{"content":[', b'"}]},"jsonrpc":"2.0","id":7}')
    nested = TooLong(9, 5, b'{"result":{"id":1,', b'"x"}]}}')
    for line, rid in ((first, "warden-3"), (last, 7)):
        answer = _refused_answer(line)
        assert answer is not None and answer.message.id == rid
        assert answer.message.error.code == -32603  # type: ignore[union-attr]
    assert _refused_answer(nested) is None


def test_a_call_before_initialize_is_told_to_initialize_first(tmp_path: Path) -> None:
    answers, _ = _run(
        tmp_path, [_call(1, "echo"), _line(INIT), _line(INITIALIZED), _call(2, "echo")]
    )
    error = answers[1]["error"]
    assert error["code"] == -32602
    assert "initialize" in error["message"] and "before" in error["message"]
    assert "data" not in error
    assert answers[2].get("result", {}).get("isError") is False, answers[2]


def test_an_answer_that_is_not_strict_json_is_refused_not_changed(tmp_path: Path) -> None:
    handshake = [_line(INIT), _line(INITIALIZED)]
    answers, data = _run(tmp_path, [*handshake, _call(1, "nan"), _call(2, "dup"), _call(3, "echo")])
    for rid, says in ((1, "NaN"), (2, "duplicate object key 'n'")):
        error = answers[rid]["error"]
        assert error["code"] == -32603, error
        assert error["message"].startswith("the MCP server's answer was refused: "), error
        assert says in error["message"]
        assert error["data"]["warden"]["result"]["decision"] == "allow"
    assert answers[3]["result"]["isError"] is False
    stored = _stored_tool_calls(data)
    assert len(stored) == 6
    assert verify(data).returncode == 0


def test_an_integer_json_does_not_carry_exactly_is_a_clean_refusal(tmp_path: Path) -> None:
    """Decision 1037: 2**64 in an answer was a traceback in the log and a
    ``gateway_error`` tool result; now it is refused as a non-strict answer is (-32603,
    the answer's step chained as that error), in one warning line."""
    logs: list[str] = []
    lines = [_line(INIT), _line(INITIALIZED), _call(1, "bigint"), _call(2, "echo")]
    answers, data = _run(tmp_path, lines, stderr=logs)
    error = answers[1]["error"]
    assert error["code"] == -32603, error
    assert error["message"] == (
        "the MCP server's answer was refused: the integer at /result/structuredContent/n "
        "is beyond ±(2^53−1), which JSON does not carry exactly"
    )
    assert error["data"]["warden"]["result"]["decision"] == "allow"
    assert isinstance(error["data"]["warden"]["result"]["chain_hash"], str)
    assert answers[2]["result"]["isError"] is False
    assert "Traceback" not in logs[0] and "gateway_error" not in logs[0], logs[0]
    said = [line for line in logs[0].splitlines() if "answer was refused" in line]
    assert len(said) == 1 and " WARNING " in said[0], logs[0]
    stored = _stored_tool_calls(data)
    assert len(stored) == 4 and "/result/structuredContent/n is beyond" in "\n".join(stored)
    assert verify(data).returncode == 0


def test_a_listing_json_does_not_carry_exactly_is_refused_too(tmp_path: Path) -> None:
    """The other forwarded answers (here ``tools/list``) take the same path (1037)."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp_helpers import proxied

    policy = tmp_path / "bundle.yaml"
    policy.write_text(allow_all_bundle("fresh-user"))

    async def main() -> None:
        async with proxied(tmp_path / "d", policy, [*SERVER, "biglist"]) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.list_tools()
            assert refused.value.error.code == -32603
            assert refused.value.error.message == (
                "the MCP server's answer was refused: the integer at "
                "/result/tools/0/inputSchema/maximum is beyond ±(2^53−1), which JSON does not "
                "carry exactly"
            )
            # (The SDK client lists tools before a call to validate its result: not here.)
            with pytest.raises(MCPError):
                await mcp.list_tools()

    anyio.run(main)
    assert verify(tmp_path / "d").returncode == 0


def test_the_channel_refuses_each_over_long_line_and_reads_on() -> None:
    # Within one read (a complete line over the limit), across reads (dropped as it
    # arrives, its ends kept), and unterminated at the end of the input.
    import anyio

    from warden.transport.stdio_channel import StdioChannel

    rfd, wfd = os.pipe()
    data = b"a" * 2000 + b"\nok\n" + b"{" + b"b" * 300_000 + b"}\nnext\n" + b"c" * 5000
    got: list[bytes | TooLong] = []

    async def main() -> None:
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        channel = StdioChannel(rfd, wfd, max_line=1024)
        async with anyio.create_task_group() as tg:

            async def feed() -> None:
                view = memoryview(data)
                while view:
                    await anyio.wait_writable(wfd)
                    try:
                        view = view[os.write(wfd, view[:100_000]) :]
                    except BlockingIOError:
                        continue
                os.close(wfd)

            tg.start_soon(feed)
            got.extend([line async for line in channel.lines()])

    try:
        anyio.run(main)
    finally:
        os.close(rfd)
    assert [g if isinstance(g, bytes) else g.size for g in got] == [
        2000, b"ok", 300_002, b"next", 5000
    ]  # fmt: skip
    long_one = got[2]
    assert isinstance(long_one, TooLong) and long_one.limit == 1024
    assert long_one.head == b"{" + b"b" * 255 and long_one.tail == b"b" * 255 + b"}"


@pytest.mark.parametrize("value", ["1023", "0", "-1", "abc", str((1 << 30) + 1), "9" * 23])
def test_max_line_bytes_out_of_range_is_a_usage_error(value: str) -> None:
    """1024 bytes to 1 GiB: a larger value would switch the bound off in practice."""
    from typer.testing import CliRunner

    from warden.cli import app

    out = CliRunner().invoke(app, ["mcp-proxy", "--max-line-bytes", value, "--", "true"])
    assert out.exit_code == 2, out.output
    assert "--max-line-bytes" in out.output
