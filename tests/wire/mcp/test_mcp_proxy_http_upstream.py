"""``warden mcp-proxy --upstream URL`` in front of a real streamable-HTTP MCP server.

``http_upstream_server.py`` (the official SDK's ``MCPServer``, FastMCP's name since
mcp 2) runs in a child process on a free loopback port and appends every tool call it
executes to a file; the proxy runs as ``python -m warden mcp-proxy --upstream …`` and
the tests talk to it over stdio with the SDK's client, as the stdio-upstream tests do.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import free_port
from mcp.shared.exceptions import MCPError
from mcp_helpers import ROOT, agent_key_file, proxied, text, verify, warden_meta

from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.settings import Settings

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "http_upstream_server.py"
BUNDLE = HERE / "http_upstream_bundle.yaml"
LIMIT_S = 30


@dataclass
class HttpUpstream:
    url: str
    calls_file: Path

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls the server has executed, in order."""
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def http_upstream(tmp_path: Path) -> Iterator[HttpUpstream]:
    port = free_port()
    calls = tmp_path / "upstream-calls.jsonl"
    log = tmp_path / "upstream.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), str(port), str(calls)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=str(tmp_path),
        )
    try:
        deadline = time.monotonic() + LIMIT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the upstream MCP server exited early:\n{log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the upstream MCP server did not listen:\n{log.read_text()}")
                time.sleep(0.1)
        yield HttpUpstream(f"http://127.0.0.1:{port}/mcp", calls)
    finally:
        stop(proc)


def test_allow_deny_and_ask_through_a_streamable_http_upstream(
    tmp_path: Path, http_upstream: HttpUpstream
) -> None:
    data = tmp_path / "warden"
    upstream = ("--upstream", http_upstream.url)

    def approve(task_id: str) -> None:
        # An approver on the desk of the same database (as `warden serve` would be).
        rt = Runtime.start(Settings(data_dir=data, policy=BUNDLE))
        try:
            alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["operators"])
            assert rt.desk.approve(task_id, alice, "checked").state is ApprovalState.APPROVED
        finally:
            rt.close()

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(data, BUNDLE, [], *upstream) as mcp:
                listed = await mcp.list_tools()
                assert {t.name for t in listed.tools} == {"echo", "delete_item"}

                echoed = await mcp.call_tool("echo", {"text": "hello over http"})
                assert not echoed.is_error, text(echoed)
                assert text(echoed) == "echo: hello over http"
                assert echoed.structured_content == {"result": "echo: hello over http"}
                meta = warden_meta(echoed)
                assert meta["decision"] == "allow" and meta["rules"] == ["echo-ok"]
                assert meta["result"]["decision"] == "allow"
                assert http_upstream.calls() == [
                    {"tool": "echo", "arguments": {"text": "hello over http"}}
                ]

                denied = await mcp.call_tool("delete_item", {"name": "everything"})
                assert denied.is_error
                assert "never-delete-everything" in text(denied)
                assert "mass_delete_blocked" in text(denied)
                assert warden_meta(denied)["decision"] == "deny"
                assert len(http_upstream.calls()) == 1  # the server never saw it

                args = {"name": "old-draft"}
                asked = await mcp.call_tool("delete_item", args)
                assert asked.is_error and "awaits human approval" in text(asked)
                meta = warden_meta(asked)
                assert meta["decision"] == "ask" and meta["rules"] == ["delete-asks"]
                task_id = meta["task_id"]
                assert task_id in text(asked)
                assert len(http_upstream.calls()) == 1

                await anyio.to_thread.run_sync(approve, task_id)
                granted = await mcp.call_tool("delete_item", args)
                assert not granted.is_error, text(granted)
                assert text(granted) == "deleted old-draft"
                assert "approval_granted" in warden_meta(granted)["reason_codes"]
                assert http_upstream.calls()[1:] == [
                    {"tool": "delete_item", "arguments": {"name": "old-draft"}}
                ]

                # Once: the identical call asks again (a new task), unseen upstream.
                third = await mcp.call_tool("delete_item", args)
                assert third.is_error and warden_meta(third)["decision"] == "ask"
                assert warden_meta(third)["task_id"] != task_id
                assert len(http_upstream.calls()) == 2

    anyio.run(run)
    assert [c["tool"] for c in http_upstream.calls()] == ["echo", "delete_item"]
    done = verify(data)
    assert done.returncode == 0, done.stdout + done.stderr
    # The MCP connection's, the desk's and the agent's registration chain.
    assert "3 sessions" in done.stdout


def proxy_command(data: Path, url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "warden",
        "mcp-proxy",
        "--data-dir",
        str(data),
        "--agent-key",
        str(agent_key_file(data)),
        "--policy",
        str(BUNDLE),
        "--upstream",
        url,
    ]


def test_an_upstream_url_where_nothing_listens_fails_the_proxy_promptly(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # bound and released: nothing listens
    log = tmp_path / "proxy.log"
    with log.open("wb") as fh:
        # stdin stays open: the proxy must give up on its own, not because its client left.
        proc = subprocess.Popen(
            proxy_command(tmp_path / "warden", url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=fh,
            cwd=str(ROOT),
        )
    try:
        code = proc.wait(LIMIT_S)
        assert proc.stdout is not None
        out = proc.stdout.read()
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcp-proxy still running {LIMIT_S}s after a dead upstream:\n{log.read_text()}")
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()
    err = log.read_text()
    assert code != 0, err
    assert out == b""  # nothing on the MCP channel
    assert url in err and "ConnectError" in err, err
    assert "the upstream MCP server" in err and "Traceback" not in err, err


def test_an_mcp_client_sees_the_dead_upstream_at_initialize(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(tmp_path / "warden", BUNDLE, [], "--upstream", url):
                pytest.fail("initialize succeeded with no upstream server")

    with pytest.raises(BaseException) as caught:
        anyio.run(run)
    leaves = list(_leaves(caught.value))
    assert any(isinstance(e, MCPError) for e in leaves), leaves


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def test_an_upstream_that_never_answers_initialize_times_out(tmp_path: Path) -> None:
    """A real server process that starts but never speaks: the proxy's upstream timeout
    ends the wait and the client gets an error, not a hang."""
    silent = [sys.executable, "-c", "import time; time.sleep(600)"]
    started = time.monotonic()

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(tmp_path / "warden", BUNDLE, silent, "--upstream-timeout", "2"):
                pytest.fail("initialize succeeded with a silent upstream")

    with pytest.raises(BaseException) as caught:
        anyio.run(run)
    leaves = list(_leaves(caught.value))
    assert any(isinstance(e, MCPError) for e in leaves), leaves
    assert time.monotonic() - started < LIMIT_S
