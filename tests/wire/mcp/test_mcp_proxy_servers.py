"""``warden mcp-proxy`` in front of real MCP servers nobody here wrote (issue 6 item 4).

Each test starts the proxy as a child process over stdio with the official SDK's
client, in front of ``mcp-server-time``, ``mcp-server-git`` (PyPI) or
``@modelcontextprotocol/server-filesystem`` (npm, installed by ``.ci/run`` with
``npm ci`` in tests/wire/mcp/node), and checks what the client gets, the files on
disk, the approval desk and ``warden verify`` afterwards.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import anyio
import pytest
from mcp_helpers import (
    FILESYSTEM_SERVER,
    NODE_DIR,
    mcp_bundle,
    proxied,
    text,
    verify,
    warden_meta,
)

from warden.approvals.tasks import ApprovalState
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.settings import Settings

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
LIMIT_S = 60


def test_an_allowed_call_returns_the_time_servers_real_result(tmp_path: Path) -> None:
    data = tmp_path / "warden"
    policy = mcp_bundle(tmp_path, tmp_path / "workspace")

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(data, policy, TIME_SERVER) as mcp:
                listed = await mcp.list_tools()
                assert {"get_current_time", "convert_time"} <= {t.name for t in listed.tools}
                result = await mcp.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
                assert not result.is_error, text(result)
                real = result.structured_content
                assert isinstance(real, dict) and real["timezone"] == "Asia/Tokyo"
                assert datetime.fromisoformat(real["datetime"]).utcoffset() is not None
                meta = warden_meta(result)
                assert meta["decision"] == "allow" and meta["rules"] == ["time"]
                assert meta["result"]["decision"] == "allow"
                assert len(meta["chain_hash"]) == 64

    anyio.run(run)
    done = verify(data)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 sessions" in done.stdout  # the MCP connection's and the agent's registration


def test_git_status_is_allowed_and_returns_the_real_output(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    (repo / "tracked.txt").write_text("one\n")
    git("add", "tracked.txt")
    git("commit", "-q", "-m", "first")
    (repo / "tracked.txt").write_text("two\n")
    (repo / "new.txt").write_text("new\n")
    data = tmp_path / "warden"
    policy = mcp_bundle(tmp_path, tmp_path / "workspace")
    server = [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(data, policy, server) as mcp:
                status = await mcp.call_tool("git_status", {"repo_path": str(repo)})
                assert not status.is_error, text(status)
                out = text(status)
                assert "tracked.txt" in out and "new.txt" in out
                assert warden_meta(status)["rules"] == ["git-read"]
                # A change is an operator's decision, and is not made meanwhile.
                add = await mcp.call_tool("git_add", {"repo_path": str(repo), "files": ["new.txt"]})
                assert add.is_error and "awaits human approval" in text(add)

    anyio.run(run)
    staged = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--name-only"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert staged.stdout == ""
    done = verify(data)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def filesystem_server() -> Path:
    if not FILESYSTEM_SERVER.exists():
        pytest.fail(
            f"@modelcontextprotocol/server-filesystem is not installed: run npm ci in {NODE_DIR}"
        )
    return FILESYSTEM_SERVER


def test_filesystem_writes_are_confined_and_a_move_asks_then_runs_once(
    tmp_path: Path, filesystem_server: Path
) -> None:
    # The server may touch all of tmp_path; the policy lets the agent change workspace/ only.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    data = tmp_path / "warden"
    policy = mcp_bundle(tmp_path, workspace)
    server = [str(filesystem_server), str(tmp_path)]
    inside, outside = workspace / "notes.txt", tmp_path / "escaped.txt"
    moved = workspace / "renamed.txt"

    def approve(task_id: str) -> None:
        # An approver on the desk of the same database (as `warden serve` would be).
        rt = Runtime.start(Settings(data_dir=data, policy=policy))
        try:
            alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["operators"])
            assert rt.desk.approve(task_id, alice, "checked").state is ApprovalState.APPROVED
        finally:
            rt.close()

    async def run() -> None:
        with anyio.fail_after(LIMIT_S):
            async with proxied(data, policy, server) as mcp:
                wrote = await mcp.call_tool("write_file", {"path": str(inside), "content": "hi"})
                assert not wrote.is_error, text(wrote)
                assert inside.read_text() == "hi"

                denied = await mcp.call_tool("write_file", {"path": str(outside), "content": "x"})
                assert denied.is_error
                assert "fs-write-outside-roots" in text(denied)
                assert "path_outside_writable_roots" in text(denied)
                assert warden_meta(denied)["decision"] == "deny"
                climbed = f"{workspace}/../escaped.txt"
                sneaky = await mcp.call_tool("write_file", {"path": climbed, "content": "x"})
                assert sneaky.is_error and "fs-write-outside-roots" in text(sneaky)

                args = {"source": str(inside), "destination": str(moved)}
                asked = await mcp.call_tool("move_file", args)
                assert asked.is_error and "awaits human approval" in text(asked)
                meta = warden_meta(asked)
                assert meta["decision"] == "ask" and meta["rules"] == ["fs-move-needs-approval"]
                task_id = meta["task_id"]
                assert task_id in text(asked) and meta["task_url"] in text(asked)
                assert meta["task_url"].endswith(f"/desk/tasks/{task_id}")
                assert inside.exists() and not moved.exists()

                again = await mcp.call_tool("move_file", args)  # still pending: same task
                assert again.is_error and warden_meta(again)["task_id"] == task_id

                await anyio.to_thread.run_sync(approve, task_id)
                granted = await mcp.call_tool("move_file", args)
                assert not granted.is_error, text(granted)
                assert "approval_granted" in warden_meta(granted)["reason_codes"]
                assert moved.read_text() == "hi" and not inside.exists()

                # Once: the same call asks again (a new task).
                third = await mcp.call_tool("move_file", args)
                assert third.is_error and warden_meta(third)["decision"] == "ask"
                assert warden_meta(third)["task_id"] != task_id

    anyio.run(run)
    assert not outside.exists() and not (tmp_path / "escaped.txt").exists()
    done = verify(data)
    assert done.returncode == 0, done.stdout + done.stderr
    # the MCP connection's, the desk's and the agent's registration chain
    assert "3 sessions" in done.stdout
