"""``warden hook claude-code`` end to end: a real ``warden serve`` on loopback, an agent
registered with ``warden agents add --key-out``, an approver key from ``warden keys
create``, and the hook run as Claude Code runs it (a subprocess per event, the event's
JSON on stdin, tests/assets/claude_code/). Asserts the hook's JSON and exit codes and
that ``warden export`` shows each decision in the session's audit chain."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Server, asset, free_port, start_server
from typer.testing import CliRunner

from warden.cli import app
from warden.store import open_store

WARDEN = [sys.executable, "-m", "warden"]


def warden(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WARDEN, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
            **(env or {}),
        },
    )


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("cc") / "srv")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def key_file(srv: Server) -> Path:
    path = srv.data_dir.parent / "claude-code.key"
    out = warden(
        "agents", "add", "claude-code", "--owner", "dev-team",
        "--key-out", str(path), "--data-dir", str(srv.data_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return path


def event(name: str, session: str, **changes: Any) -> str:
    doc = json.loads(asset(f"claude_code/{name}.json").read_text())
    doc = json.loads(json.dumps(doc).replace("SESSION", session))
    doc.update(changes)
    return json.dumps(doc)


def hook(
    srv: Server, key: Path, stdin: str, *flags: str, url: str | None = None
) -> tuple[int, dict[str, Any] | None, str]:
    out = warden(
        "hook", "claude-code", *flags, stdin=stdin,
        env={"WARDEN_URL": url or srv.url, "WARDEN_AGENT_KEY": str(key)},
    )  # fmt: skip
    body = json.loads(out.stdout) if out.stdout.strip() else None
    return out.returncode, body, out.stderr


def pre(body: dict[str, Any] | None) -> dict[str, Any]:
    assert body is not None
    out: dict[str, Any] = body["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse"
    return out


def audit(srv: Server, session: str) -> list[tuple[str, str]]:
    """(step_type, decision) of the session's audit entries, read from the server's
    database (what ``warden export --session`` writes)."""
    store = open_store(srv.database_url, migrate=False)
    try:
        return [
            (r["entry"]["step_type"], r["entry"]["verdict"]["decision"])
            for r in store.iter_records(session)
            if r["kind"] == "entry"
        ]
    finally:
        store.close()


def in_process_hook(stdin: str, *flags: str, url: str, key: Path) -> tuple[int, Any, str]:
    """The same command through typer's runner (no process start: these cases test
    the mapping, the subprocess tests above test the process)."""
    res = CliRunner().invoke(
        app,
        ["hook", "claude-code", *flags],
        input=stdin,
        env={"WARDEN_URL": url, "WARDEN_AGENT_KEY": str(key)},
    )
    body = json.loads(res.stdout) if res.stdout.strip() else None
    return res.exit_code, body, res.stderr


@pytest.fixture(scope="module")
def approver_token(srv: Server) -> str:
    out = warden(
        "keys", "create", "--principal", "alice", "--role", "approver",
        "--group", "operators", "--json", "--data-dir", str(srv.data_dir),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    token: str = json.loads(out.stdout)["token"]
    return token


def approve(srv: Server, token: str, task_id: str) -> None:
    """What ``warden approvals approve`` posts (tests/cli/test_cli_approvals.py runs it)."""
    r = httpx.post(
        f"{srv.url}/v1/approvals/{task_id}/approve",
        json={"reason": "reviewed"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text


def task_in(reason: str) -> str:
    match = re.search(r"task_[0-9a-f]{32}", reason)
    assert match, reason
    return match.group(0)


def test_a_session_through_the_hook_is_decided_and_audited(
    srv: Server, key_file: Path, approver_token: str
) -> None:
    sid = str(uuid.uuid4())
    assert hook(srv, key_file, event("session_start", sid)) == (0, {}, "")
    local = {"url": srv.url, "key": key_file}
    assert in_process_hook(event("user_prompt_submit", sid), **local) == (0, {}, "")

    # allow: no permissionDecision, so Claude Code's own permission rules still apply.
    rc, body, _ = hook(srv, key_file, event("pre_tool_use_read", sid))
    out = pre(body)
    assert rc == 0 and "permissionDecision" not in out
    assert out["permissionDecisionReason"].startswith("Warden: ")
    assert in_process_hook(event("post_tool_use_read", sid), **local) == (0, {}, "")

    # deny
    rc, body, _ = hook(srv, key_file, event("pre_tool_use_bash_rm", sid))
    out = pre(body)
    assert rc == 0 and out["permissionDecision"] == "deny"
    assert "destructive-shell" in out["permissionDecisionReason"]

    # ask: refused at once, naming the desk task
    rc, body, _ = hook(srv, key_file, event("pre_tool_use_mcp_delete", sid))
    out = pre(body)
    assert rc == 0 and out["permissionDecision"] == "deny"
    assert "/desk/tasks/" in out["permissionDecisionReason"]
    task_id = task_in(out["permissionDecisionReason"])

    # modify: the redacted input, shown to the user (ask) unless auto-approved
    rc, body, _ = in_process_hook(event("pre_tool_use_secret", sid), **local)
    out = pre(body)
    assert out["permissionDecision"] == "ask"
    assert out["updatedInput"] == {"host": "db.internal", "password": "[REDACTED]"}
    again = event("pre_tool_use_secret", sid, tool_use_id="toolu_05")
    rc, body, _ = in_process_hook(again, "--auto-approve", **local)
    assert pre(body)["permissionDecision"] == "allow"
    assert pre(body)["updatedInput"]["password"] == "[REDACTED]"

    # After a human approves on the desk, the model's identical retry is allowed once.
    approve(srv, approver_token, task_id)
    retry = event("pre_tool_use_mcp_delete", sid, tool_use_id="toolu_06")
    rc, body, _ = in_process_hook(retry, "--auto-approve", **local)
    assert pre(body)["permissionDecision"] == "allow"

    # An event Warden does not govern is answered without a step.
    assert in_process_hook(event("stop", sid), **local) == (0, {}, "")
    assert hook(srv, key_file, event("session_end", sid)) == (0, {}, "")

    assert audit(srv, sid) == [
        ("steps/sessionStart", "allow"),
        ("steps/userMessage", "allow"),
        ("steps/toolCallRequest", "allow"),
        ("steps/toolCallResult", "allow"),
        ("steps/toolCallRequest", "deny"),
        ("steps/toolCallRequest", "ask"),
        ("steps/toolCallRequest", "modify"),
        ("steps/toolCallRequest", "modify"),
        ("steps/toolCallRequest", "allow"),
        ("steps/sessionEnd", "allow"),
    ]
    # After SessionEnd the chain is sealed: a late tool call is refused.
    late = event("pre_tool_use_read", sid, tool_use_id="toolu_07")
    rc, body, _ = in_process_hook(late, **local)
    assert pre(body)["permissionDecision"] == "deny"


def test_waiting_for_the_desk_then_allowing(
    srv: Server, key_file: Path, approver_token: str
) -> None:
    sid = str(uuid.uuid4())
    token = approver_token
    proc = subprocess.Popen(
        [*WARDEN, "hook", "claude-code", "--wait", "40", "--poll", "0.2"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
             "WARDEN_URL": srv.url, "WARDEN_AGENT_KEY": str(key_file)},
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(event("pre_tool_use_mcp_delete", sid))
    proc.stdin.close()
    task_id = None
    deadline = time.monotonic() + 30
    while task_id is None and time.monotonic() < deadline:
        listed = httpx.get(
            f"{srv.url}/v1/approvals", headers={"Authorization": f"Bearer {token}"}
        ).json()["data"]["tasks"]
        for t in listed:
            if t.get("correlation", {}).get("session_id") == sid:
                task_id = t["id"]
        time.sleep(0.2)
    assert task_id, "the hook's ask filed no desk task"
    approve(srv, token, task_id)
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(40) == 0, stderr
    out = pre(json.loads(stdout))
    assert "permissionDecision" not in out  # allowed: Claude Code's own rules apply
    steps = audit(srv, sid)
    assert steps[0] == ("steps/toolCallRequest", "ask")
    assert steps[-1] == ("steps/toolCallRequest", "allow")


def test_on_ask_prompt_hands_the_question_to_claude_code(srv: Server, key_file: Path) -> None:
    sid = str(uuid.uuid4())
    stdin = event("pre_tool_use_mcp_delete", sid)
    rc, body, _ = in_process_hook(stdin, "--on-ask", "prompt", url=srv.url, key=key_file)
    out = pre(body)
    assert rc == 0 and out["permissionDecision"] == "ask"
    assert "/desk/tasks/" in out["permissionDecisionReason"]


def test_fail_closed_without_warden_or_key_and_bad_input_blocks(
    srv: Server, key_file: Path, tmp_path: Path
) -> None:
    sid = str(uuid.uuid4())
    down = f"http://127.0.0.1:{free_port()}"
    rc, body, _ = hook(srv, key_file, event("pre_tool_use_read", sid), url=down)
    assert rc == 0 and pre(body)["permissionDecision"] == "deny"
    assert "Warden could not decide" in pre(body)["permissionDecisionReason"]
    rc, body, _ = in_process_hook(event("user_prompt_submit", sid), url=down, key=key_file)
    assert rc == 0 and body is not None and body["decision"] == "block"
    rc, body, _ = in_process_hook(event("session_start", sid), url=down, key=key_file)
    assert rc == 0 and body is not None and body["continue"] is False
    missing = tmp_path / "missing.key"
    rc, body, _ = in_process_hook(event("pre_tool_use_read", sid), url=srv.url, key=missing)
    assert pre(body)["permissionDecision"] == "deny" and "agent key" in str(body)
    rc, body, err = hook(srv, key_file, "this is not json")
    assert rc == 2 and body is None and "not a JSON object" in err
    rc, body, err = in_process_hook(
        json.dumps({"hook_event_name": "PreToolUse"}), url=srv.url, key=key_file
    )
    assert rc == 2 and "session_id" in err
    # A tool call without its input is refused, never decided as if its input were `{}`.
    no_input = {"session_id": sid, "hook_event_name": "PreToolUse", "tool_name": "Bash"}
    rc, body, err = in_process_hook(json.dumps(no_input), url=srv.url, key=key_file)
    assert rc == 2 and body is None and "tool_input" in err
    # Nothing reached the audit log of that session.
    assert audit(srv, sid) == []


def test_the_hooks_default_timeout_is_the_clients() -> None:
    """``warden hook claude-code --timeout`` defaults to the Python client's per-request
    timeout, which outlasts the server's wait for a locked store, so a locked store
    reaches the hook as Warden's signed deny, not an unreachable Warden (decision 1158)."""
    import inspect

    from warden.cli_hook import claude_code
    from warden.client.sync import DEFAULT_TIMEOUT_S

    assert inspect.signature(claude_code).parameters["timeout"].default == DEFAULT_TIMEOUT_S


def test_the_hook_command_starts_without_the_store_or_policy_engine() -> None:
    """``warden hook`` is started once per Claude Code event: it must not load the
    store, Alembic or the policy engine (decision 307)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "warden", "hook", "claude-code"],
        input="{}", capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert out.returncode == 2 and "no hook_event_name" in out.stderr
    loaded = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "warden.client.sync" in loaded and "warden.cli_hook" in loaded
    for heavy in ("warden.store", "alembic", "sqlalchemy", "warden.policy.engine", "warden.cli"):
        assert heavy not in loaded, heavy
