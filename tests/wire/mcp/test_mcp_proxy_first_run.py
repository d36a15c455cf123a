"""`warden mcp-proxy` on a data directory that was never served (no demo agent yet):
one line that says how to get an agent key, exit status 2, and nothing created. A fresh
user got only "agent key file … does not exist". And an upstream that fails at start
answers the client's pending ``initialize`` before the exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port
from mcp_helpers import INIT, INITIALIZED, ROOT, agent_key_file, allow_all_bundle


def test_a_fresh_data_dir_says_how_to_get_an_agent_key(tmp_path: Path) -> None:
    data = tmp_path / "never-served"
    done = subprocess.run(
        [sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--",
         sys.executable, "-c", "pass"],
        capture_output=True, text=True, cwd=str(ROOT), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"agent key file {data / 'agents' / 'demo-agent.key'} does not exist" in said
    assert "--agent-key FILE" in said and "warden agents add" in said
    assert f"warden serve --data-dir {data}" in said
    assert done.stdout == ""  # the MCP channel stays clean
    assert not data.exists()


@pytest.mark.parametrize("where", ["url", "command"])
def test_an_upstream_that_fails_at_start_answers_the_pending_initialize(
    tmp_path: Path, where: str
) -> None:
    """Decision 1038: the proxy exited 2 and the client's `initialize` waited for an
    answer that never came. Now it is answered -32603 naming the upstream's failure
    first, while the client still holds stdin open, and nothing else is written."""
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(allow_all_bundle("first-run"))
    upstream = (
        ["--upstream", f"http://127.0.0.1:{free_port()}/mcp"]
        if where == "url"
        else ["--", sys.executable, "-c", "pass"]
    )
    command = [
        sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
        str(policy), "--agent-key", str(agent_key_file(data)), *upstream,
    ]  # fmt: skip
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=str(ROOT), env=dict(os.environ),
    ) as proc:  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(json.dumps(INIT).encode() + b"\n")
            proc.stdin.write(json.dumps(INITIALIZED).encode() + b"\n")  # not answered
            proc.stdin.flush()
            # stdin stays open, as a client's does while it waits.
            assert proc.wait(timeout=90) == 2
            out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
        finally:
            proc.kill()
    lines = out.splitlines()
    assert len(lines) == 1, out
    answer = json.loads(lines[0])
    assert answer["id"] == INIT["id"] and "result" not in answer, answer
    assert answer["error"]["code"] == -32603
    message = answer["error"]["message"]
    assert message.startswith("the upstream MCP server ") and " failed: " in message, message
    assert message.endswith("; warden mcp-proxy is exiting")
    assert (upstream[1] if where == "url" else "-c pass") in message
    assert "Traceback" not in err and " failed: " in err, err


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("WARDEN_DATABASE_LOCK_TIMEOUT_MS", "abc", "database_lock_timeout_ms: Input should "
         "be a valid integer, unable to parse string as an integer"),
        ("WARDEN_DATABASE_LOCK_TIMEOUT_MS", "0", "database_lock_timeout_ms: Input should "
         "be greater than or equal to 1"),
        ("WARDEN_SQLITE_SYNC", "bogus", "sqlite_sync: Input should be 'FULL', 'NORMAL' or "
         "'EXTRA'"),
        ("WARDEN_LOG_LEVEL", "bogus", "log_level: Input should be 'DEBUG', 'INFO', "
         "'WARNING', 'ERROR' or 'CRITICAL'"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line_and_answer_the_pending_initialize(
    tmp_path: Path, variable: str, value: str, problem: str
) -> None:
    """Decision 1061: pydantic's multi-line dump with its errors.pydantic.dev URL (and, for
    a bad log level, a traceback from `logging`) became `warden serve`'s one line, and the
    client's `initialize` is answered with it."""
    data = tmp_path / "d"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    env[variable] = value
    done = subprocess.run(
        [sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--",
         sys.executable, "-c", "pass"],
        input=json.dumps(INIT) + "\n", capture_output=True, text=True, cwd=str(ROOT),
        timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    # The variable and its value are named (decision 1171); --log-level reads its
    # variable through the option, the others through the settings model.
    problem += f" (environment: {variable}={value!r})"
    assert done.stderr.splitlines() == [f"error: invalid settings: {problem}"]
    answer = json.loads(done.stdout)
    assert answer["id"] == INIT["id"] and answer["error"]["code"] == -32603, answer
    assert answer["error"]["message"] == (
        f"invalid settings: {problem}; warden mcp-proxy is exiting"
    )
    assert not data.exists()


@pytest.mark.parametrize("problem", ["missing", "unreadable", "unregistered"])
def test_a_refused_agent_key_answers_the_pending_initialize(tmp_path: Path, problem: str) -> None:
    """Decision 1140: a key file that is missing, not a key file, or the key of an agent
    this Warden does not know ended the proxy with the client's `initialize` unanswered
    (a closed pipe); it now gets the one-line reason, as bad settings do (decision 1061)."""
    data = tmp_path / "d"
    policy = tmp_path / "bundle.yaml"
    policy.write_text(allow_all_bundle("first-run"))
    key = tmp_path / "agent.key"
    if problem == "unreadable":
        key.write_text("not a key file\n")
    elif problem == "unregistered":
        # Registered in another data directory, so unknown to this one.
        key = agent_key_file(tmp_path / "elsewhere", "stranger")
        agent_key_file(data)  # this one exists and has its own agents
    done = subprocess.run(
        [sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data), "--policy",
         str(policy), "--agent-key", str(key), "--", sys.executable, "-c", "pass"],
        input=json.dumps(INIT) + "\n" + json.dumps(INITIALIZED) + "\n", capture_output=True,
        text=True, cwd=str(ROOT), timeout=60, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = done.stderr[done.stderr.find("error: ") :]  # after the runtime's start log
    assert said.startswith("error: agent key "), done.stderr
    reason = said.removeprefix("error: ").rstrip("\n")
    assert "\n" not in reason, said
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout  # the notification is not answered
    answer = json.loads(lines[0])
    assert answer["id"] == INIT["id"] and "result" not in answer, answer
    assert answer["error"]["code"] == -32603
    assert answer["error"]["message"] == f"{reason}; warden mcp-proxy is exiting"
    assert "Traceback" not in done.stderr
