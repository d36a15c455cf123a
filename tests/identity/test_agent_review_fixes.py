"""Fresh-user review of issue 15 (agent identities), on both store backends: undefined
budgets warn, ``--key-out`` creates no folders, a never-served data dir says how to get
its key, ``agents show`` prints lists as text, every revoked-agent hint says the id is
spent, and maker-checker refusals name the owner as the owner (decisions 253-258)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import DEFAULT_POLICY, ROOT, asset
from fastapi.testclient import TestClient

from warden.approvals.desk import NotPermitted
from warden.identity.agents import AgentExists, AgentRevoked
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.server.app import create_app
from warden.spend.budgets import Budget, BudgetKind, Period
from warden.wire.acs.client import AcsClient

REVOKED = "a revoked agent id is never reused: register the agent under a new id"


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def _warden(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "warden", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _define(rt: Runtime, budget_id: str) -> None:
    rt.spend.define_budget(Budget(budget_id, BudgetKind.ORG, "USD", Decimal("10"), Period.MONTH))


def test_cli_add_warns_about_an_undefined_budget(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    _define(rt, "acme")
    data, url = rt.settings.data_dir, rt.settings.resolved_database_url()
    r = _warden(
        data, "agents", "add", "bot-a", "--owner", "alice", "--budget", "nosuch.budget",
        "--budget", "acme", "--json", "--database-url", url,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "warning: budget 'nosuch.budget' is not defined" in r.stderr
    assert "'acme'" not in r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["warnings"]) == 1 and "nosuch.budget" in doc["warnings"][0]
    assert doc["agent"]["budgets"] == ["acme", "nosuch.budget"]  # registered anyway
    r = _warden(
        data, "agents", "add", "bot-b", "--owner", "alice", "--budget", "acme",
        "--json", "--database-url", url,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "warning: budget" not in r.stderr and json.loads(r.stdout)["warnings"] == []


def test_rest_add_warns_about_an_undefined_budget(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    _define(rt, "acme")
    _, token = rt.api_keys.create("root", Role.ADMIN)
    admin = {"authorization": f"Bearer {token}"}
    with TestClient(create_app(rt)) as http:
        r = http.post(
            "/v1/agents",
            headers=admin,
            json={"agent_id": "bot-a", "owner": "alice", "budgets": ["nosuch.budget", "acme"]},
        )
        assert r.status_code == 200, r.text
        data = r.json()["data"]
        assert "budget 'nosuch.budget' is not defined" in data["warning"]
        assert "'acme'" not in data["warning"]
        assert data["agent"]["budgets"] == ["acme", "nosuch.budget"]
        r = http.post(
            "/v1/agents",
            headers=admin,
            json={"agent_id": "bot-b", "owner": "a", "budgets": ["acme"]},
        )
        assert r.status_code == 200 and "warning" not in r.json()["data"]


def test_key_out_in_a_missing_folder_is_refused(
    tmp_path: Path, make_runtime: Callable[..., Runtime]
) -> None:
    rt = make_runtime()
    data, url = rt.settings.data_dir, rt.settings.resolved_database_url()
    key_out = tmp_path / "nonexistent" / "dir" / "k"
    r = _warden(
        data, "agents", "add", "bot-a", "--owner", "alice", "--key-out", str(key_out),
        "--database-url", url,
    )  # fmt: skip
    assert r.returncode == 2
    assert "does not exist" in r.stderr
    assert not (tmp_path / "nonexistent").exists()
    assert rt.agents is not None and rt.agents.get("bot-a") is None  # nothing registered
    rt.agents.add("bot-b", "alice")
    key_ids = [k.key_id for k in rt.agents.keys("bot-b")]
    r = _warden(data, "agents", "rotate", "bot-b", "--key-out", str(key_out), "--database-url", url)
    assert r.returncode == 2 and not (tmp_path / "nonexistent").exists()
    assert [k.key_id for k in rt.agents.keys("bot-b")] == key_ids  # not rotated


def test_a_never_served_data_dir_says_how_to_get_its_key(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    r = _warden(data, "agents", "add", "bot-a", "--owner", "alice")
    assert r.returncode == 2
    assert f"run `warden serve --data-dir {data}` once first (it creates the key)" in (
        " ".join(r.stderr.split())
    )


def test_show_prints_lists_as_text(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    rt.agents.add("bot-a", "alice", ["ops", "dev"], ["acme.ops"])
    rt.agents.add("bot-b", "alice")
    url = rt.settings.resolved_database_url()
    out = _warden(rt.settings.data_dir, "agents", "show", "bot-a", "--database-url", url).stdout
    assert "groups: dev, ops\n" in out and "budgets: acme.ops\n" in out and "[" not in out
    out = _warden(rt.settings.data_dir, "agents", "show", "bot-b", "--database-url", url).stdout
    assert "groups: none\n" in out and "budgets: none\n" in out


def test_every_revoked_agent_hint_says_register_a_new_id(
    tmp_path: Path, make_runtime: Callable[..., Runtime]
) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    _, cred = rt.agents.add("bot-a", "alice")
    rt.agents.revoke("bot-a")
    with pytest.raises(AgentExists, match=REVOKED):
        rt.agents.add("bot-a", "alice")
    with pytest.raises(AgentRevoked, match=REVOKED):
        rt.agents.rotate("bot-a")
    rt.agents.add("bot-live", "alice")
    with pytest.raises(AgentExists, match="is already registered"):
        rt.agents.add("bot-live", "alice")  # an active id is simply taken
    data, url = rt.settings.data_dir, rt.settings.resolved_database_url()
    r = _warden(
        data, "keys", "create", "--role", "agent", "--agent", "bot-a", "--database-url", url
    )
    assert r.returncode == 2 and REVOKED in " ".join(r.stderr.split())
    key = tmp_path / "bot-a.key"
    cred.write(key)
    r = subprocess.run(
        [
            sys.executable, "-m", "warden", "mcp-proxy", "--data-dir", str(data),
            "--policy", str(DEFAULT_POLICY), "--agent-key", str(key), "--database-url", url,
            "--", sys.executable, "-c", "pass",
        ],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    flat = " ".join(r.stderr.split())
    assert r.returncode == 2 and REVOKED in flat and "re-register" not in flat


def test_the_owner_is_refused_as_the_owner(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(asset("approvals/desk.yaml"))
    assert rt.agents is not None
    _, cred = rt.agents.add("bot2", "alice")
    client = AcsClient.for_agent(rt.acs.handle, cred)
    client.hello()
    r = client.tool_call("delete_file", {"path": "/srv/x"})["result"]
    assert r["decision"] == "ask", r
    tid = str(r["ask_details"]["task_id"])
    alice, token = rt.api_keys.create("alice", Role.APPROVER, ["operators"])
    with pytest.raises(NotPermitted) as err:
        rt.desk.approve(tid, alice, "mine")
    assert f"alice owns the agent bot2 that requested task {tid}" in str(err.value)
    assert "alice requested" not in str(err.value)
    with TestClient(create_app(rt)) as http:
        r = http.post(
            f"/v1/approvals/{tid}/approve",
            headers={"authorization": f"Bearer {token}"},
            json={"reason": "mine"},
        )
        assert r.status_code == 403, r.text
        assert "alice owns the agent bot2 that requested task" in r.text
