"""GET /metrics (issue 18 item 2): a real `warden serve` scraped over loopback on both
store backends, counters moving after real decisions, and the access guard."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import DEFAULT_POLICY, ROOT, Server, agent_client, ensure_agent, start_server
from prometheus_client.parser import text_string_to_metric_families

from warden import native
from warden.runtime import Runtime
from warden.server.app import create_app

BUDGETS = """\
- id: ops-org
  kind: org
  currency: USD
  cap: "500.00"
  period: month
  principals: [admin]
"""


def scrape(
    url: str, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(url + "/metrics", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def ops_server(tmp_path: Path, database_url: str) -> Iterator[Server]:
    data = tmp_path / "srv"
    data.mkdir()
    budgets = data / "budgets.yaml"
    budgets.write_text(BUDGETS)
    srv = start_server(
        data,
        DEFAULT_POLICY,
        "--database-url",
        database_url,
        "--budgets",
        str(budgets),
        "--replica-id",
        "replica-a",
    )
    yield srv
    srv.stop()


def test_scrape_counts_real_decisions(ops_server: Server, database_url: str) -> None:
    before = scrape(ops_server.url)
    assert value(before, "warden_metrics_store_up") == 1
    info = [k for k in before if k[0] == "warden_replica_info"]
    assert len(info) == 1 and ("replica_id", "replica-a") in info[0][1]
    assert any(lbl == ("bundle_id", "warden-default") for lbl in info[0][1])
    # Whether the decision path runs compiled: the server is this interpreter on these
    # sources, so its guard found what this process's did.
    assert ("native", native.state) in info[0][1], info
    assert value(before, "warden_budget_remaining", budget="ops-org", currency="USD") == 500.0

    with httpx.Client(timeout=30) as http:
        agent = agent_client(
            lambda b: http.post(ops_server.acs_url, content=b).json(), database_url
        )
        agent.hello()
        agent.call("steps/sessionStart", {})
        allow = agent.tool_call("read_file", {"path": "/tmp/x"})["result"]
        deny = agent.tool_call("bash", {"command": "rm -rf /"})["result"]
        ask = agent.tool_call("delete_file", {"path": "/srv/data"})["result"]
    assert (allow["decision"], deny["decision"], ask["decision"]) == ("allow", "deny", "ask")

    token = (ops_server.data_dir / "api.token").read_text().strip()
    quote = httpx.post(
        ops_server.url + "/v1/quotes",
        json={"budgetId": "ops-org", "action": "buy", "amount": "12.50", "currency": "USD"},
        headers={"authorization": f"Bearer {token}", "idempotency-key": "metrics-quote-0001"},
        timeout=30,
    )
    assert quote.status_code == 200, quote.text

    after = scrape(ops_server.url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("warden_decisions_total", wire="acs", outcome="allow", rule="lifecycle") >= 1
    assert moved("warden_decisions_total", wire="acs", outcome="allow", rule="tool-calls") == 1
    assert (
        moved("warden_decisions_total", wire="acs", outcome="deny", rule="destructive-shell") == 1
    )
    assert moved("warden_decisions_total", wire="acs", outcome="ask", rule="ask-before-delete") == 1
    assert moved("warden_decisions_total", wire="spend", outcome="allow", rule="spend-quotes") == 1
    assert moved("warden_decision_seconds_count", wire="acs") >= 4
    assert moved("warden_decision_seconds_count", wire="spend") == 1
    # Every ACS step was group-committed: batches of >= 1 entry, each with its fsync time.
    assert moved("warden_commit_batch_size_count") >= 1
    assert moved("warden_commit_batch_size_sum") >= 4
    assert moved("warden_commit_seconds_count") == moved("warden_commit_batch_size_count")
    # The ask is a pending task for the bundle's approver group; the quote holds money.
    assert value(after, "warden_approvals_pending", group="operators") == 1
    assert value(after, "warden_budget_held", budget="ops-org", currency="USD") == 12.5
    assert value(after, "warden_budget_remaining", budget="ops-org", currency="USD") == 487.5
    assert value(after, "warden_webhook_outbox_depth") == 0
    # No series is labelled by agent or session.
    for name, labels in after:
        assert not {k for k, _ in labels} & {"agent_id", "session_id", "agent", "session"}, name


def _key(data_dir: Path, role: str) -> str:
    import json

    ensure_agent(data_dir, f"p-{role}", role)  # an agent key belongs to a registered agent
    done = subprocess.run(
        [sys.executable, "-m", "warden", "keys", "create", "--principal", f"p-{role}"]
        + ["--role", role, "--json", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return str(json.loads(done.stdout)["token"])


def test_key_access_refuses_without_an_admin_key(tmp_path: Path) -> None:
    data = tmp_path / "srv"
    data.mkdir()
    srv = start_server(data, DEFAULT_POLICY, "--metrics-access", "key")
    try:
        bare = httpx.get(srv.url + "/metrics", timeout=30)
        assert bare.status_code == 401 and "Bearer" in bare.headers["www-authenticate"]
        assert "warden_decisions" not in bare.text
        wrong = httpx.get(srv.url + "/metrics", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        agent = _key(data, "agent")
        refused = httpx.get(srv.url + "/metrics", headers={"authorization": f"Bearer {agent}"})
        assert refused.status_code == 403
        admin = (data / "api.token").read_text().strip()
        assert value(scrape(srv.url, admin), "warden_metrics_store_up") == 1
    finally:
        srv.stop()


def _get(app: object, client: tuple[str, int], token: str | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=client)  # type: ignore[arg-type]
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as c:
            return await c.get("/metrics", headers=headers)

    return asyncio.run(go())


def test_loopback_default_refuses_other_clients(runtime: Runtime) -> None:
    app = create_app(runtime)
    assert _get(app, ("127.0.0.1", 5000)).status_code == 200
    assert _get(app, ("::1", 5000)).status_code == 200
    assert _get(app, ("203.0.113.7", 5000)).status_code == 401
    assert _get(app, ("203.0.113.7", 5000), runtime.api_token).status_code == 200


def test_one_registry_per_runtime(make_runtime) -> None:  # type: ignore[no-untyped-def]
    a, b = make_runtime(), make_runtime()
    create_app(a)
    create_app(a)  # a second app on one runtime shares its registry, counts once
    create_app(b)
    assert a.metrics is not None and b.metrics is not None
    assert a.metrics.registry is not b.metrics.registry
    assert len(a.guardian.observers._observers) == 1  # noqa: SLF001


def test_kla_decision_is_counted_once(runtime: Runtime) -> None:
    from fastapi.testclient import TestClient

    from warden.identity.api_keys import Role

    ensure_agent(runtime, "kla-agent")
    _, agent = runtime.api_keys.create("kla-agent", Role.AGENT, ())
    record = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
    admin = {"authorization": f"Bearer {runtime.api_token}"}
    with TestClient(create_app(runtime)) as c:
        # TestClient's peer is "testclient", not loopback: the admin key is required.
        assert c.get("/metrics").status_code == 401
        r = c.post(
            "/v1/action-requests",
            content=record.read_bytes(),
            headers={"authorization": f"Bearer {agent}", "content-type": "application/json"},
        )
        assert r.status_code in (200, 201), r.text
        decision = r.json()["data"]["decision"]
        # The same request again is a replay of the stored answer, not a new decision.
        c.post(
            "/v1/action-requests",
            content=record.read_bytes(),
            headers={"authorization": f"Bearer {agent}", "content-type": "application/json"},
        )
        text = c.get("/metrics", headers=admin).text
    kla = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "warden_decisions_total" and s.labels["wire"] == "kla"
    ]
    assert [(s.labels["outcome"], s.labels["rule"], s.value) for s in kla] == [
        ("allow", "kla-actions", 1.0)
    ], (kla, decision)
