"""The proxy's own stdio transport to the real server (decision 852): tools/call answers
go straight to their caller and the rest to the SDK session, a server that dies fails
the call in flight, and shutdown stops the server as the SDK's ``stdio_client`` does
(stdin closed, a grace period, then its process group terminated)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from warden.transport.upstream_stdio import connect_stdio

SERVER = [sys.executable, str(Path(__file__).with_name("fake_stdio_server.py"))]

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not Path("/proc").is_dir(), reason="POSIX transport, /proc"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie awaiting its reaper is not alive.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def _server_pid() -> int:
    """The fake server this process started (its child, by command line)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"fake_stdio_server" in cmdline:
            return int(proc.name)
    raise AssertionError("no server process")


def test_calls_go_direct_and_the_session_gets_the_rest() -> None:
    async def main() -> None:
        with anyio.fail_after(30):
            async with connect_stdio(SERVER, 10.0) as (session, direct):
                assert direct.usable
                listed = await session.list_tools()
                assert [t.name for t in listed.tools] == ["echo", "die", "slow"]
                results = []
                async with anyio.create_task_group() as tg:

                    async def call(i: int) -> None:
                        results.append(await direct.call_tool("echo", {"i": i}))

                    for i in range(5):
                        tg.start_soon(call, i)
                texts = sorted(r.content[0].text for r in results)  # type: ignore[union-attr]
                assert texts == [f'{{"i": {i}}}' for i in range(5)]
                # The session's own requests still work after the direct calls.
                assert len((await session.list_tools()).tools) == 3

    anyio.run(main)


def test_a_server_that_dies_fails_the_call_in_flight_and_later_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        with anyio.fail_after(30):
            async with connect_stdio(SERVER, 10.0) as (_session, direct):
                with pytest.raises(MCPError) as caught:
                    await direct.call_tool("die", {})
                assert caught.value.error.code == types.CONNECTION_CLOSED
                with pytest.raises(MCPError) as again:
                    await direct.call_tool("echo", {})
                assert again.value.error.code == types.CONNECTION_CLOSED

    anyio.run(main)
    # Said once on stderr, not only to each caller (a fresh user saw nothing).
    closed = [r for r in caplog.records if "closed its output" in r.getMessage()]
    assert len(closed) == 1 and closed[0].levelname == "ERROR", caplog.text


@pytest.mark.parametrize("mode", ["plain", "chatty"])
def test_a_server_leaves_when_its_stdin_closes(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    pids: list[int] = []

    async def main() -> None:
        async with connect_stdio([*SERVER, mode], 10.0) as (_session, _direct):
            pids.append(_server_pid())

    started = time.monotonic()
    anyio.run(main)
    assert time.monotonic() - started < 10
    assert not _alive(pids[0])
    # The proxy stopped it: no error about a server that went away.
    assert "closed its output" not in caplog.text


def test_a_server_that_ignores_the_end_of_its_stdin_is_terminated() -> None:
    pids: list[int] = []

    async def main() -> None:
        async with connect_stdio([*SERVER, "stubborn"], 10.0) as (_session, _direct):
            pids.append(_server_pid())

    anyio.run(main)
    assert not _alive(pids[0])
