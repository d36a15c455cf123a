"""Shadow mode and `warden policy activate` (issue 19 item 3): divergences reach the log
and the metrics without changing any answer; an activation switches a running server's
decisions, and /readyz shows which bundle each replica serves."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from conftest import AGENTDOJO_POLICY, service_client, start_server
from dojo import AGENTDOJO_BUDGETS, send_money_candidate, valid
from fastapi.testclient import TestClient

from warden.policy.bundle import load_bundle
from warden.runtime import Runtime
from warden.server.app import create_app

#: A transfer to a payee the account never paid: the AgentDojo bundle asks.
NEW_PAYEE = {"recipient": "XX00NEWPAYEE", "amount": 10, "subject": "rent", "date": "2026-12-01"}


def call(client: Any, tool: str, args: dict[str, Any]) -> str:
    resp = client.call(
        "steps/toolCallRequest",
        {"tool": {"name": tool}, "arguments": {k: {"value": v} for k, v in args.items()}},
    )
    return str(resp["result"]["decision"])


def events(db: Path, kind: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [
            json.loads(e)
            for (e,) in con.execute(
                "SELECT event FROM log_events WHERE kind = ? ORDER BY log_index", (kind,)
            )
        ]
    finally:
        con.close()


def test_shadow_divergences_reach_the_log_and_the_metrics(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    candidate = send_money_candidate(tmp_path)
    rt = make_runtime(AGENTDOJO_POLICY, shadow_policy=candidate, policy_poll_interval_s=0)
    app = create_app(rt)  # the metrics registry
    client = service_client(rt)
    client.hello()
    # The candidate never enforces: the live answer is the active bundle's ask.
    assert call(client, "send_money", NEW_PAYEE) == "ask"
    assert call(client, "get_balance", {}) == "allow"  # both bundles allow it
    assert rt.shadow is not None
    rt.shadow.flush()
    recorded = events(rt.settings.data_dir / "warden.db", "policy.shadow_divergence")
    assert len(recorded) == 1, recorded
    ev = recorded[0]
    assert (ev["tool"], ev["wire"], ev["change"]) == ("send_money", "acs", "loosened")
    assert (ev["active"]["decision"], ev["shadow"]["decision"]) == ("ask", "allow")
    assert ev["shadow"]["digest"] == load_bundle(candidate).ref.digest
    assert ev["active"]["digest"] == rt.bundle.ref.digest
    with TestClient(app) as http:
        text = http.get("/metrics", headers={"authorization": f"Bearer {rt.api_token}"}).text
        ready = http.get("/readyz").json()
    divergence = 'active="ask",kind="loosened",shadow="allow",wire="acs"'
    assert f"warden_shadow_divergences_total{{{divergence}}} 1.0" in text
    # hello is no decision; the two tool calls are.
    assert 'warden_shadow_evaluations_total{wire="acs"} 2.0' in text
    assert ready["shadow_bundle"]["digest"] == ev["shadow"]["digest"]
    # `warden whatif --shadow` summarises them from the log.
    proc = subprocess.run(
        [sys.executable, "-m", "warden", "whatif", "--shadow", "--json", "--fail-on", "loosen"]
        + ["--data-dir", str(rt.settings.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    doc = valid(json.loads(proc.stdout))
    assert doc["decisions"] == 1 and doc["changes"]["loosened"] == 1
    assert doc["matrix"] == {"ask": {"allow": 1}}
    assert list(doc["by_tool"]) == ["send_money"]
    assert doc["shadow_candidates"] == {ev["shadow"]["digest"]: 1}
    from typer.testing import CliRunner

    from warden.cli import app as cli

    human = CliRunner().invoke(cli, ["whatif", "--shadow", "--data-dir", str(rt.settings.data_dir)])
    assert human.exit_code == 0, human.stderr
    assert "shadow divergences recorded: 1" in human.stdout and "send_money" in human.stdout


def wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_activate_switches_a_running_server_and_readyz_shows_digests(
    tmp_path: Path, make_runtime: Callable[..., Runtime]
) -> None:
    candidate = send_money_candidate(tmp_path)
    digest = load_bundle(candidate).ref.digest
    data = tmp_path / "srv"
    srv = start_server(
        data,
        AGENTDOJO_POLICY,
        "--policy-poll-interval-s",
        "0.2",
        "--budgets",
        str(AGENTDOJO_BUDGETS),
    )
    try:
        # The demo agent: its transfers are charged to its budget once policy allows them.
        client = srv.client(agent_id="demo-agent")
        client.hello()
        assert call(client, "send_money", NEW_PAYEE) == "ask"
        before = httpx.get(srv.url + "/readyz").json()
        assert before["bundle"]["digest"] == load_bundle(AGENTDOJO_POLICY).ref.digest
        assert (before["active_bundle"], before["bundle_current"]) == (None, True)
        # A second replica on the same database that does not poll: it stays behind.
        lagging = make_runtime(
            AGENTDOJO_POLICY, database_url=srv.database_url, policy_poll_interval_s=0
        )
        proc = subprocess.run(
            [sys.executable, "-m", "warden", "policy", "activate", str(candidate)]
            + ["--data-dir", str(data), "--by", "ops", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert valid(json.loads(proc.stdout), "policy-activate")["bundle"]["digest"] == digest
        wait_for(lambda: httpx.get(srv.url + "/readyz").json()["bundle"]["digest"] == digest)
        after = httpx.get(srv.url + "/readyz").json()
        assert (after["active_bundle"], after["bundle_current"]) == (digest, True)
        # The running server now decides with the candidate: the same transfer is allowed.
        assert call(client, "send_money", NEW_PAYEE) == "allow"
        with TestClient(create_app(lagging)) as http:
            behind = http.get("/readyz").json()
        assert behind["bundle"]["digest"] != digest
        assert (behind["active_bundle"], behind["bundle_current"]) == (digest, False)
        assert lagging.follower is not None and lagging.follower.check() is True
        with TestClient(create_app(lagging)) as http:
            assert http.get("/readyz").json()["bundle_current"] is True
            auth = {"authorization": f"Bearer {lagging.api_token}"}
            assert f'bundle_digest="{digest}"' in http.get("/metrics", headers=auth).text
        # On the record: the activation and each replica's load of it.
        db = data / "warden.db"
        activated = events(db, "policy.activate")
        assert [(e["digest"], e["by"], e["generation"]) for e in activated] == [(digest, "ops", 1)]
        loads = [e for e in events(db, "warden.bundle_load") if e.get("generation") == 1]
        assert len(loads) == 2 and {e["digest"] for e in loads} == {digest}
    finally:
        srv.stop()
    # A restart serves the activated bundle, not its --policy file.
    restarted = make_runtime(AGENTDOJO_POLICY, database_url=srv.database_url)
    assert restarted.guardian.engine.bundle.ref.digest == digest
