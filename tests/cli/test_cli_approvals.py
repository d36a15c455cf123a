"""``warden approvals list | show | approve | deny | reroute`` against a real
``warden serve`` over loopback, with keys made by ``warden keys create``, as an
operator would run them (subprocesses, exit codes, JSON output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, start_server

WARDEN = [sys.executable, "-m", "warden"]


def warden(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WARDEN, *args],
        capture_output=True,
        text=True,
        timeout=60,
        # A clean environment, but the same Warden as the test (PYTHONPATH, when set).
        env={
            "PATH": "/usr/bin:/bin",
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
            **(env or {}),
        },
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data")
    yield srv
    srv.stop()


def make_key(srv: Server, principal: str, role: str, *groups: str) -> str:
    flags = [x for g in groups for x in ("--group", g)]
    out = warden(
        "keys",
        "create",
        "--principal",
        principal,
        "--role",
        role,
        *flags,
        "--json",
        "--data-dir",
        str(srv.data_dir),
    )
    assert out.returncode == 0, out.stderr
    token: str = json.loads(out.stdout)["token"]
    return token


def approvals(srv: Server, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return warden("approvals", *args, "--url", srv.url, env={"WARDEN_TOKEN": token})


def pending_delete(srv: Server, path: str) -> tuple[Any, str]:
    agent = srv.client(agent_id="agent-cli")
    agent.hello()
    r = agent.tool_call("delete_file", {"path": path})["result"]
    assert r["decision"] == "ask"
    return agent, r["ask_details"]["task_id"]


def test_list_show_approve_then_the_agent_resubmits(server: Server) -> None:
    alice = make_key(server, "alice", "approver", "operators")
    agent, tid = pending_delete(server, "/srv/old")
    listed = approvals(server, alice, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [t["id"] for t in data["tasks"]] == [tid]
    table = approvals(server, alice, "list")
    # At any width: a long cell folds over lines, so read each column down.
    rows = [line.split("│")[1:-1] for line in table.stdout.splitlines() if line.startswith("│")]
    task, _, action, requester = ("".join(r[i].strip() for r in rows) for i in range(4))
    assert (task, action, requester) == (tid, "delete_file", "agent-cli"), table.stdout
    shown = approvals(server, alice, "show", tid)
    assert shown.returncode == 0
    assert '"path": "/srv/old"' in shown.stdout and "ask-before-delete" in shown.stdout
    done = approvals(server, alice, "approve", tid, "--reason", "old logs")
    assert done.returncode == 0 and "approved" in done.stdout
    trail = json.loads(approvals(server, alice, "show", tid, "--json").stdout)["task"]
    assert [h["event"] for h in trail["history"]] == ["requested", "approved"]
    assert trail["history"][1]["by"]["principal"] == "alice"
    assert trail["history"][1]["reason"] == "old logs"
    assert agent.tool_call("delete_file", {"path": "/srv/old"})["result"]["decision"] == "allow"


def test_deny_needs_a_reason_and_refusals_exit_1(server: Server) -> None:
    alice = make_key(server, "alice", "approver", "operators")
    fay = make_key(server, "fay", "approver", "finance")
    _, tid = pending_delete(server, "/srv/x")
    missing = warden("approvals", "deny", tid, "--url", server.url, env={"WARDEN_TOKEN": alice})
    assert missing.returncode == 2 and "--reason" in missing.stderr
    wrong_group = approvals(server, fay, "approve", tid)
    assert wrong_group.returncode == 1 and "approval:not_permitted" in wrong_group.stderr
    denied = approvals(server, alice, "deny", tid, "--reason", "keep it")
    assert denied.returncode == 0 and "denied" in denied.stdout
    again = approvals(server, alice, "approve", tid)
    assert again.returncode == 1 and "approval:task_conflict" in again.stderr
    unknown = approvals(server, alice, "show", "task_nope")
    assert unknown.returncode == 1 and "approval:task_not_found" in unknown.stderr


def test_reroute_and_bad_credentials(server: Server) -> None:
    olga = make_key(server, "olga", "approver", "operators")
    agent_key = make_key(server, "bot", "agent")
    _, tid = pending_delete(server, "/srv/y")
    moved = approvals(server, olga, "reroute", tid, "--group", "storage", "--reason", "theirs")
    assert moved.returncode == 0 and "storage" in moved.stdout
    # Accepted, but nobody can decide it yet: said on stderr (fresh-user review of issue 14).
    warned = " ".join(moved.stderr.split())
    assert "warning: no active approver key is in group 'storage'" in warned, moved.stderr
    sam = make_key(server, "sam", "approver", "storage")
    back = approvals(server, sam, "reroute", tid, "--group", "operators")
    assert back.returncode == 0 and "operators" in back.stdout
    assert "warning" not in back.stderr
    forbidden = approvals(server, agent_key, "list")
    assert forbidden.returncode == 1 and "auth:forbidden" in forbidden.stderr
    bad = approvals(server, "wdn_000000000000_" + "x" * 43, "list")
    assert bad.returncode == 2 and "auth:required" in bad.stderr
    no_token = warden("approvals", "list", "--url", server.url)
    assert no_token.returncode == 2 and "API key is required" in no_token.stderr
    down = warden("approvals", "list", "--url", "http://127.0.0.1:9", env={"WARDEN_TOKEN": olga})
    assert down.returncode == 2 and "cannot reach Warden" in down.stderr


def test_agent_text_cannot_drive_the_approvers_terminal(server: Server) -> None:
    alice = make_key(server, "alice", "approver", "operators")
    agent = server.client(agent_id="ansi\x1b[2J\x1b[31mRED\x1b[0m\rbob")
    agent.hello()
    r = agent.tool_call("delete_\x1b[32mSAFE\x1b[0m\r\nfine", {"path": "/x\u202e"})["result"]
    tid = r["ask_details"]["task_id"]
    for out in (approvals(server, alice, "list"), approvals(server, alice, "show", tid)):
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "\r" not in out.stdout and "\u202e" not in out.stdout
        assert "\\u001b" in out.stdout
    traversal = approvals(server, alice, "show", "../budgets")
    assert traversal.returncode == 1 and "HTTP 404" in traversal.stderr  # not /v1/budgets
    assert "Traceback" not in traversal.stderr
