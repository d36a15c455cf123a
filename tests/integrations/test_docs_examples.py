"""The copy-paste examples of docs/integrations.md, run as written against a real
``warden serve`` (bundle tests/assets/integrations/claude.yaml):

- the Python client block, with ``WARDEN_URL``/``WARDEN_AGENT_KEY`` set;
- the Claude Code settings.json block (identical to examples/claude-code/settings.json),
  given to the real Claude Code CLI (``claude -p --settings``, the one the SDK wheel
  bundles) against the scripted Claude, so Claude Code itself runs
  ``warden hook claude-code`` for each event;
- the Claude Agent SDK block (the body of examples/claude-agent-sdk/governed_agent.py).

Each run's decisions are read back from the audit chain."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Server, agent_credential, asset, start_server
from scripted_claude import BUNDLED_CLI, Script, offline_env, scripted_claude

from warden.store import open_store

DOC = ROOT / "docs" / "integrations.md"
needs_cli = pytest.mark.skipif(not BUNDLED_CLI.exists(), reason="no bundled Claude Code CLI")


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(
        tmp_path_factory.mktemp("docs") / "srv", asset("integrations/claude.yaml")
    )
    yield server
    server.stop()


def key_for(srv: Server, agent_id: str, folder: Path) -> Path:
    path = folder / f"{agent_id}.key"
    agent_credential(srv.database_url, agent_id).write(path)
    return path


def decisions(srv: Server, agent_id: str) -> list[tuple[str, str]]:
    """(step_type, decision) of every entry of ``agent_id``'s sessions, in order."""
    store = open_store(srv.database_url, migrate=False)
    try:
        rows: list[tuple[str, str]] = []
        session_agent: dict[str, str] = {}
        for r in store.iter_records():
            if r["kind"] == "session":
                session_agent[r["session_id"]] = r["agent_id"]
            elif r["kind"] == "entry" and session_agent.get(r["session_id"]) == agent_id:
                rows.append((r["entry"]["step_type"], r["entry"]["verdict"]["decision"]))
        return rows
    finally:
        store.close()


def test_the_client_example(
    srv: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (code,) = blocks("python")[:1]
    monkeypatch.setenv("WARDEN_URL", srv.url)
    monkeypatch.setenv("WARDEN_AGENT_KEY", str(key_for(srv, "doc-client", tmp_path)))
    exec(compile(code, "docs/integrations.md#python-client", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == "# Warden\n"
    assert decisions(srv, "doc-client") == [
        ("steps/toolCallRequest", "allow"),
        ("steps/toolCallResult", "allow"),
    ]


def test_the_settings_snippet_is_the_example_file() -> None:
    (snippet,) = blocks("json")
    shipped = (ROOT / "examples" / "claude-code" / "settings.json").read_text()
    assert json.loads(snippet) == json.loads(shipped)


@needs_cli
def test_claude_code_runs_the_hook_from_the_settings_snippet(srv: Server, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "build").mkdir(parents=True)
    notes = work / "notes.txt"
    settings = json.loads(blocks("json")[0])
    settings["env"] = {"WARDEN_URL": srv.url,
                       "WARDEN_AGENT_KEY": str(key_for(srv, "claude-code", tmp_path))}  # fmt: skip
    # The snippet's command, with this test's interpreter (the venv's `warden` script
    # would run the installed Warden, not this checkout).
    text = json.dumps(settings).replace("warden hook", f"{sys.executable} -m warden hook")
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(text)
    script = Script(tool_uses=[
        ("Bash", {"command": f"rm -rf {work / 'build'}", "description": "wipe"}),
        ("Bash", {"command": "echo hello", "description": "greet"}),
        ("Write", {"file_path": str(notes), "content": "x\n"}),
    ])  # fmt: skip
    with scripted_claude(script) as base_url:
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            **offline_env(base_url, tmp_path / "home"),
            # Claude Code gives SessionEnd hooks 1.5 s by default; a loaded CI machine
            # needs longer to start Python (docs/integrations.md, known limits).
            "CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS": "60000",
        }
        run = subprocess.run(
            [str(BUNDLED_CLI), "-p", "tidy up", "--settings", str(settings_file),
             "--setting-sources", "", "--output-format", "json", "--max-turns", "10",
             "--model", "claude-sonnet-4-5"],
            cwd=work, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    # The tool results the CLI sent back to the model.
    results = [
        b
        for body in script.requests
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    text_of = {b["tool_use_id"]: json.dumps(b.get("content")) for b in results}
    assert "Recursive deletes" in text_of["toolu_000"] and (work / "build").is_dir()
    assert "hello" in text_of["toolu_001"]
    assert "desk" in text_of["toolu_002"] and not notes.exists()
    assert decisions(srv, "claude-code") == [
        ("steps/sessionStart", "allow"),
        ("steps/userMessage", "allow"),
        ("steps/toolCallRequest", "deny"),
        ("steps/toolCallRequest", "allow"),
        ("steps/toolCallResult", "allow"),
        ("steps/toolCallRequest", "ask"),
        ("steps/sessionEnd", "allow"),
    ]


@needs_cli
def test_the_agent_sdk_example(
    srv: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = blocks("python")[1]
    assert code in (ROOT / "examples" / "claude-agent-sdk" / "governed_agent.py").read_text()
    work = tmp_path / "work"
    (work / "build").mkdir(parents=True)
    script = Script(tool_uses=[
        ("Bash", {"command": f"rm -rf {work / 'build'}", "description": "wipe"}),
        ("Bash", {"command": "echo hello", "description": "greet"}),
    ])  # fmt: skip
    monkeypatch.chdir(work)
    monkeypatch.setenv("WARDEN_URL", srv.url)
    monkeypatch.setenv("WARDEN_AGENT_KEY", str(key_for(srv, "sdk-agent", tmp_path)))
    with scripted_claude(script) as base_url:
        for name, value in offline_env(base_url, tmp_path / "home").items():
            monkeypatch.setenv(name, value)
        exec(compile(code, "docs/integrations.md#claude-agent-sdk", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == "Done.\n"
    assert (work / "build").is_dir()
    assert decisions(srv, "sdk-agent") == [
        ("steps/toolCallRequest", "deny"),
        ("steps/toolCallRequest", "allow"),
        ("steps/toolCallResult", "allow"),
    ]
