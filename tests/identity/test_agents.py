"""The agent identity registry (issue 15 item 1): register, list, show, rotate, revoke
in the library, over ``/v1/agents`` (admin only) and with ``warden agents``; every change
is an audit event; both store backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT
from fastapi.testclient import TestClient

from warden.errors import ConfigError
from warden.identity.agents import (
    AgentExists,
    AgentNotFound,
    derive_agent_ikm,
    load_agent_key,
)
from warden.ledger.verify import verify_records
from warden.runtime import Runtime
from warden.server.app import create_app


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def _audit_events(rt: Runtime) -> list[str]:
    return [
        r["entry"]["step_type"]
        for r in rt.store.iter_records()
        if "entry" in r and r["entry"]["step_type"].startswith("warden/agents.")
    ]


def test_register_rotate_revoke_each_audited(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    agent, cred = rt.agents.add("bot-a", "alice", ["ops", "ops"], ["acme.ops"])
    assert (agent.owner, agent.groups, agent.budgets) == ("alice", ("ops",), ("acme.ops",))
    assert cred.ikm == derive_agent_ikm(rt.keys._ikm, cred.key_id)  # noqa: SLF001
    assert rt.agents.resolve(cred.key_id) == agent
    with pytest.raises(AgentExists):
        rt.agents.add("bot-a", "bob")
    with pytest.raises(ConfigError):
        rt.agents.add("group:ops", "alice")
    with pytest.raises(ConfigError):
        rt.agents.add("bot-c", "alice", budgets=["Not A Budget"])
    new = rt.agents.rotate("bot-a")
    assert new.key_id != cred.key_id
    assert rt.agents.resolve(cred.key_id) is None
    assert rt.agents.resolve(new.key_id) is not None
    revoked = rt.agents.revoke("bot-a")
    assert not revoked.active
    assert rt.agents.resolve(new.key_id) is None
    assert all(k.revoked_at is not None for k in rt.agents.keys("bot-a"))
    with pytest.raises(AgentNotFound):
        rt.agents.rotate("nobody")
    assert _audit_events(rt) == [
        "warden/agents.registered",
        "warden/agents.rotated",
        "warden/agents.revoked",
    ]
    # The audit chain verifies under the master IKM.
    report = verify_records(rt.store.iter_records(), ikm=rt.keys._ikm)  # noqa: SLF001
    assert report.signatures_checked > 0


def test_v1_agents_is_admin_only(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    assert rt.agents is not None
    rt.agents.add("bot-a", "alice")
    _, agent_token = rt.api_keys.create("bot-a", "agent")
    _, approver_token = rt.api_keys.create("carol", "approver")
    admin = {"authorization": f"Bearer {rt.api_token}"}
    with TestClient(create_app(rt)) as http:
        for token in (agent_token, approver_token):
            r = http.get("/v1/agents", headers={"authorization": f"Bearer {token}"})
            assert r.status_code == 403, r.text
        assert http.get("/v1/agents").status_code == 401
        r = http.post(
            "/v1/agents",
            json={"agent_id": "bot-b", "owner": "bob", "groups": ["ops"]},
            headers=admin,
        )
        assert r.status_code == 200, r.text
        cred = r.json()["data"]["credential"]
        assert cred["agent_id"] == "bot-b" and len(bytes.fromhex(cred["ikm"])) == 32
        r = http.post("/v1/agents", json={"agent_id": "bot-b", "owner": "x"}, headers=admin)
        assert (r.status_code, r.json()["blockedBy"]) == (409, "agent:exists")
        r = http.post("/v1/agents", json={"agent_id": "bad id", "owner": "x"}, headers=admin)
        assert r.status_code == 400, r.text
        assert rt.agents.get("bad id") is None
        r = http.get("/v1/agents", headers=admin)
        assert [a["agent_id"] for a in r.json()["data"]["agents"]] == ["bot-a", "bot-b"]
        r = http.post("/v1/agents/bot-b/rotate", headers=admin)
        assert r.json()["data"]["credential"]["key_id"] != cred["key_id"]
        r = http.get("/v1/agents/bot-b", headers=admin)
        keys = r.json()["data"]["agent"]["keys"]
        assert [k["revoked_at"] is None for k in keys] == [False, True]
        assert http.get("/v1/agents/nope", headers=admin).status_code == 404
        r = http.post("/v1/agents/bot-a/revoke", headers=admin)
        assert r.status_code == 200 and r.json()["data"]["agent"]["active"] is False
    # Revoking the agent revoked its API key too.
    assert rt.api_keys.authenticate(agent_token) is None
    events = _audit_events(rt)
    assert events.count("warden/agents.registered") == 2 and "warden/agents.revoked" in events


def _warden(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "warden", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_agents(tmp_path: Path, make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    data = rt.settings.data_dir
    url = rt.settings.resolved_database_url()
    r = _warden(data, "agents", "add", "bot-a", "--owner", "alice", "--json", "--database-url", url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"agent_id", "key_id", "ikm"} and doc["agent"]["owner"] == "alice"
    key_file = tmp_path / "b.key"
    r = _warden(
        data,
        "agents",
        "add",
        "bot-b",
        "--owner",
        "bob",
        "--key-out",
        str(key_file),
        "--database-url",
        url,
    )
    assert r.returncode == 0, r.stderr
    assert key_file.stat().st_mode & 0o777 == 0o600
    cred = load_agent_key(key_file)
    assert rt.agents is not None and rt.agents.resolve(cred.key_id) is not None
    r = _warden(data, "agents", "list", "--json", "--database-url", url)
    assert [a["agent_id"] for a in json.loads(r.stdout)] == ["bot-a", "bot-b"]
    r = _warden(data, "agents", "rotate", "bot-b", "--json", "--database-url", url)
    assert json.loads(r.stdout)["key_id"] != cred.key_id
    r = _warden(data, "agents", "show", "bot-b", "--json", "--database-url", url)
    assert len(json.loads(r.stdout)["keys"]) == 2
    # An agent API key belongs to a registered agent.
    r = _warden(
        data,
        "keys",
        "create",
        "--role",
        "agent",
        "--agent",
        "bot-b",
        "--json",
        "--database-url",
        url,
    )
    assert r.returncode == 0, r.stderr
    token = json.loads(r.stdout)["token"]
    assert json.loads(r.stdout)["principal"] == "bot-b"
    r = _warden(
        data, "keys", "create", "--role", "agent", "--agent", "ghost", "--database-url", url
    )
    assert r.returncode == 2 and "not registered" in r.stderr
    r = _warden(data, "agents", "revoke", "bot-b", "--json", "--database-url", url)
    assert json.loads(r.stdout)["active"] is False
    assert rt.api_keys.authenticate(token) is None  # revoking the agent revoked its key
    assert _warden(data, "agents", "show", "nope", "--database-url", url).returncode == 1
    assert (
        _warden(data, "agents", "add", "bot-a", "--owner", "x", "--database-url", url).returncode
        == 2
    )
