"""The copy-paste examples of docs/integrations-frameworks.md run as written.

Each example block (marked ``<!-- example: NAME -->``) is executed verbatim; its
``run_errands(model)`` is then called with the framework's scripted model in place of
the real one, against a `warden serve` on loopback with the test bundle, an agent
registered with `warden agents add --key-out` and the environment the doc tells the
reader to export. A desk approver approves the payment over REST.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_langchain
import test_openai_agents
import test_pydantic_ai
from conftest import ROOT, Server, start_server
from harness import BUNDLE, THREE_CALLS, approving, audit, decisions_by_tool, http_approver

from warden.store import open_store

DOC = ROOT / "docs" / "integrations-frameworks.md"
EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)\n```", re.S)


def examples() -> dict[str, str]:
    found = dict(EXAMPLE.findall(DOC.read_text()))
    assert set(found) == {"openai-agents", "langchain", "pydantic-ai"}, found.keys()
    return found


def cli(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "warden", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, str]]:
    """The doc's set-up: `warden serve --policy tests/integrations/bundle.yaml`, the agent
    registered with its key written to a file, and an approver key for the desk."""
    data = tmp_path_factory.mktemp("docs") / "srv"
    srv = start_server(data, BUNDLE)
    try:
        key_file = data.parent / "errands-bot.key"
        cli(
            "agents", "add", "errands-bot", "--owner", "you@example.com",
            "--key-out", str(key_file), "--data-dir", str(data),
        )  # fmt: skip
        token = cli(
            "keys", "create", "--principal", "fiona", "--role", "approver",
            "--group", "finance", "--data-dir", str(data),
        )["token"]  # fmt: skip
        yield srv, key_file, str(token)
    finally:
        srv.stop()


SCRIPTED = {
    "openai-agents": lambda: test_openai_agents.scripted(THREE_CALLS),
    "langchain": lambda: test_langchain.scripted(THREE_CALLS),
    "pydantic-ai": lambda: test_pydantic_ai.scripted(THREE_CALLS),
}


@pytest.mark.parametrize("name", sorted(SCRIPTED))
def test_the_documented_example_runs(
    name: str, served: tuple[Server, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, key_file, token = served
    monkeypatch.setenv("WARDEN_URL", srv.url)
    monkeypatch.setenv("WARDEN_AGENT_KEY", str(key_file))
    if name == "openai-agents":
        from agents import set_tracing_disabled

        set_tracing_disabled(True)  # no trace export from a test
    namespace: dict[str, Any] = {"__name__": f"docs_example_{name.replace('-', '_')}"}
    exec(compile(examples()[name], f"{DOC}#{name}", "exec"), namespace)  # noqa: S102
    run_errands = namespace["run_errands"]

    store = open_store(srv.database_url, migrate=False)
    try:
        before = {r["session_id"] for r in store.iter_records()}
        with approving(http_approver(srv.url, token)):
            out = run_errands(SCRIPTED[name]())
            if inspect.iscoroutine(out):
                out = asyncio.run(out)
        rows = audit(r for r in store.iter_records() if r["session_id"] not in before)
        outputs = sorted(
            json.loads(r["request"])["payload"]["outputs"][0]["value"]
            for r in store.iter_records()
            if r["kind"] == "entry"
            and r["session_id"] not in before
            and r["entry"]["step_type"] == "steps/toolCallResult"
        )
    finally:
        store.close()

    assert out == "All done."
    assert decisions_by_tool(rows) == {
        "get_weather": ["allow"],
        "wipe_disk": ["deny"],
        "send_payment": ["ask", "allow"],
    }
    assert outputs == ["Sent 40 to bob", "Sunny in Oslo"]  # wipe_disk never ran
