"""Three `warden serve` replicas on one PostgreSQL: every guarantee holds across them.

The replicas are real processes on their own ports sharing one database (a fresh schema,
dropped afterwards) and one data directory (the IKM and the bootstrap admin token). They
start at the same moment, so they also race to migrate, to load the budgets file and to
register the admin key. The scenarios drive them concurrently from many threads:

- ACS sessions whose steps alternate across replicas: every chain verifies, one entry
  per step, in step order;
- 300 concurrent quotes against one budget with room for exactly 100: exactly 100
  admitted, nothing overspent;
- one idempotency key sent to every replica at once: one reservation, one answer;
- one approval consumed from two replicas at once: one allow, the other asks again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from cluster import Cluster, make_cluster
from conftest import agent_client, postgres_schema

from warden.wire.acs.client import AcsClient, http_transport


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with postgres_schema() as url:
        data = tmp_path_factory.mktemp("cluster")
        gen = make_cluster(url, data)
        c = next(gen)
        c.start(3)
        try:
            yield c
        finally:
            gen.close()


def _rotating(cluster: Cluster, start: int) -> Any:
    """An ACS transport sending each request to the next replica in turn."""
    http = httpx.Client(timeout=30.0)
    sends = [http_transport(r.url + "/acs", http) for r in cluster.replicas]
    turn = [start]

    def send(body: bytes) -> dict[str, Any]:
        i = turn[0] % len(sends)
        turn[0] += 1
        return sends[i](body)

    send.close = http.close  # type: ignore[attr-defined]
    return send


def test_every_replica_is_ready(cluster: Cluster) -> None:
    for r in cluster.replicas:
        ready = httpx.get(r.url + "/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["status"] == "ready", ready.text


def test_acs_sessions_alternating_across_replicas_keep_one_chain_each(cluster: Cluster) -> None:
    steps = 12

    def run(n: int) -> tuple[str, list[str]]:
        transport = _rotating(cluster, n)
        try:
            client = agent_client(transport, cluster.database_url, agent_id=f"agent-{n}")
            assert "result" in client.hello()
            decisions = []
            for k in range(steps):
                r = client.tool_call("read_file", {"path": f"/srv/{n}/{k}"})
                decisions.append(r["result"]["decision"])
            return client.session_id, decisions
        finally:
            transport.close()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    for _sid, decisions in results:
        assert decisions == ["allow"] * steps
    cluster.verify()
    for sid, _ in results:
        seqs = cluster.rows("SELECT seq FROM entries WHERE session_id = ? ORDER BY seq", sid)
        assert [s for (s,) in seqs] == list(range(steps))  # one entry per step, no fork


def _quote(url: str, token: str, budget: str, key: str | None = None, **extra: Any) -> Any:
    headers = {"authorization": f"Bearer {token}"}
    if key is not None:
        headers["idempotency-key"] = key
    body = {"budgetId": budget, "action": "buy", "amount": "1", "currency": "USD", **extra}
    return httpx.post(url + "/v1/quotes", json=body, headers=headers, timeout=60)


def test_300_concurrent_spends_on_three_replicas_admit_exactly_the_cap(cluster: Cluster) -> None:
    token = cluster.token
    urls = [r.url for r in cluster.replicas]
    with ThreadPoolExecutor(30) as pool:
        answers = list(pool.map(lambda i: _quote(urls[i % 3], token, "race.team.bot"), range(300)))
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {200: 100, 402: 200}, statuses
    for a in answers:
        if a.status_code == 402:
            assert a.json()["blockedBy"] == "budget:exceeded"
    budget = httpx.get(urls[0] + "/v1/budgets/race.team.bot", headers=cluster.auth()).json()
    assert budget["data"]["budget"]["remaining"] == "0", budget
    ids = {
        a.json()["data"]["quote"]["reservation"]["reservationId"]
        for a in answers
        if a.status_code == 200
    }
    assert len(ids) == 100
    (held,) = cluster.rows("SELECT count(*) FROM reservations WHERE budget_id = ?", "race.team.bot")
    assert held == (100,)
    cluster.verify()


def test_one_idempotency_key_sent_to_every_replica_has_one_effect(cluster: Cluster) -> None:
    token = cluster.token
    keys = [f"scaleout-{uuid.uuid4()}" for _ in range(20)]
    jobs = [(r.url, k) for k in keys for r in cluster.replicas]
    with ThreadPoolExecutor(30) as pool:
        answers = list(pool.map(lambda j: (j[1], _quote(j[0], token, "idem.team.bot", j[1])), jobs))
    by_key: dict[str, list[dict[str, Any]]] = {}
    for key, a in answers:
        assert a.status_code == 200, a.text
        by_key.setdefault(key, []).append(a.json())
    for key, bodies in by_key.items():
        ids = {b["data"]["quote"]["reservation"]["reservationId"] for b in bodies}
        assert len(ids) == 1, (key, ids)
        assert sorted(bool(b.get("replayed")) for b in bodies) == [False, True, True]
    (count,) = cluster.rows(
        "SELECT count(*) FROM reservations WHERE budget_id = ?", "idem.team.bot"
    )
    assert count == (20,)
    cluster.verify()


def _approver_token(cluster: Cluster) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "warden",
            "keys",
            "create",
            "--principal",
            f"alice-{uuid.uuid4().hex[:6]}",
            "--role",
            "approver",
            "--group",
            "operators",
            "--json",
            "--data-dir",
            str(cluster.data_dir),
            "--database-url",
            cluster.database_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token: str = json.loads(out.stdout)["token"]
    return token


@pytest.mark.parametrize("attempt", range(4))
def test_one_approval_consumed_from_two_replicas_at_once_allows_once(
    cluster: Cluster, attempt: int
) -> None:
    r0, r1, r2 = cluster.replicas
    http = httpx.Client(timeout=30.0)
    try:
        agent = agent_client(
            http_transport(r0.url + "/acs", http), cluster.database_url, agent_id="agent-7"
        )
        agent.hello()
        asked = agent.tool_call("delete_file", {"path": f"/srv/{attempt}"})["result"]
        assert asked["decision"] == "ask"
        task_id = asked["ask_details"]["task_id"]
        approver = {"authorization": f"Bearer {_approver_token(cluster)}"}
        ok = http.post(
            f"{r2.url}/v1/approvals/{task_id}/approve", json={"reason": "ok"}, headers=approver
        )
        assert ok.status_code == 200, ok.text
        racers = [
            agent_client(
                http_transport(r.url + "/acs", http),
                cluster.database_url,
                agent_id="agent-7",
                session_id=agent.session_id,
                track_chain=False,
            )
            for r in (r1, r2)
        ]
        barrier = threading.Barrier(2)
        results: list[dict[str, Any]] = []

        def resubmit(client: AcsClient) -> None:
            barrier.wait()
            results.append(client.tool_call("delete_file", {"path": f"/srv/{attempt}"})["result"])

        threads = [threading.Thread(target=resubmit, args=(c,)) for c in racers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        http.close()
    decisions = sorted(r["decision"] for r in results)
    assert decisions == ["allow", "ask"], json.dumps(results, indent=1)[:3000]
    (allowed,) = [r for r in results if r["decision"] == "allow"]
    assert allowed["policy_data"]["approval"]["task_id"] == task_id
    (state,) = cluster.rows("SELECT state FROM tasks WHERE task_id = ?", task_id)
    assert state == ("consumed",)
    cluster.verify()


def test_one_request_sent_to_every_replica_is_decided_once(cluster: Cluster) -> None:
    http = httpx.Client(timeout=30.0)
    try:
        agent = agent_client(
            http_transport(cluster.replicas[0].url + "/acs", http), cluster.database_url
        )
        agent.hello()
        envelope = agent.envelope(
            "steps/toolCallRequest",
            {"tool": {"name": "read_file"}, "arguments": {"path": {"value": "/srv/once"}}},
        )
        body = json.dumps(envelope).encode()
        barrier = threading.Barrier(3)

        def send(url: str) -> dict[str, Any]:
            barrier.wait()
            answer: dict[str, Any] = http.post(
                url + "/acs", content=body, headers={"content-type": "application/json"}
            ).json()
            return answer

        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(send, [r.url for r in cluster.replicas]))
    finally:
        http.close()
    decided = [a for a in answers if "result" in a]
    refused = [a for a in answers if "error" in a]
    assert len(decided) == 1 and decided[0]["result"]["decision"] == "allow", answers
    assert len(refused) == 2, answers
    for a in refused:
        assert "replay" in json.dumps(a["error"]).lower(), a
    rows = cluster.rows(
        "SELECT count(*) FROM entries WHERE session_id = ? AND step_id = ?",
        agent.session_id,
        envelope["params"]["request_id"],
    )
    assert rows == [(1,)]
    cluster.verify()
