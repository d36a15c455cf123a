"""Desk transitions notify the configured webhooks: a runtime started with a webhooks
file, real ACS asks and approvals, the real delivery worker, a real HTTP receiver."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import asset, service_client
from test_delivery import SECRET, Receiver, receiver  # noqa: F401 - the fixture

from warden.approvals.notifier import DeliveryWorker
from warden.approvals.webhooks import verify
from warden.errors import ConfigError
from warden.identity.api_keys import Role
from warden.runtime import Runtime
from warden.schemas import SchemaSet
from warden.store.outbox_sql import list_deliveries


def hooks_file(tmp_path: Path, url: str, *, allow: bool = True) -> Path:
    path = tmp_path / "webhooks.yaml"
    lines = [
        "webhooks:",
        "  - id: ops-pager",
        f"    url: {url}",
        f"    secret: {SECRET}",
    ]
    if allow:
        lines.append("allow_networks: [loopback]")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_transition_is_delivered_signed(
    make_runtime: Callable[..., Runtime],
    tmp_path: Path,
    receiver: Receiver,  # noqa: F811
) -> None:
    rt = make_runtime(asset("approvals/desk.yaml"), webhooks=hooks_file(tmp_path, receiver.url))
    assert rt.notifier is not None
    rt.notifier.stop()  # deliver deterministically with run_once below
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    tid = agent.tool_call("delete_file", {"path": "/x"})["result"]["ask_details"]["task_id"]
    alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["operators"])
    rt.desk.approve(tid, alice, "fine")
    assert agent.tool_call("delete_file", {"path": "/x"})["result"]["decision"] == "allow"
    # Outbox rows were committed with the transitions, before anything was sent.
    assert [d.event for d in list_deliveries(rt.store, tid)] == [
        "requested",
        "approved",
        "consumed",
    ]
    assert rt.notifier.config.webhooks
    with DeliveryWorker(rt.store, rt.notifier.config, timeout_s=2.0) as worker:
        assert worker.run_once() == 3
    assert len(receiver.requests) == 3
    schemas = SchemaSet("adcp")
    payloads = []
    for got in receiver.requests:
        assert verify(SECRET, got.headers, got.body, int(time.time())).ok
        payload = json.loads(got.body)
        assert schemas.first_error("core/mcp-webhook-payload.json", payload) is None
        payloads.append(payload)
    assert [p["status"] for p in payloads] == ["input-required", "completed", "completed"]
    assert {p["task_id"] for p in payloads} == {tid}
    assert payloads[1]["result"]["votes"][0]["principal"] == "alice"
    assert "alice" in payloads[1]["message"]
    assert len({p["idempotency_key"] for p in payloads}) == 3
    assert all(d.status.value == "delivered" for d in list_deliveries(rt.store, tid))


def test_a_private_destination_stops_the_start(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    path = hooks_file(tmp_path, "http://127.0.0.1:9/hook", allow=False)
    with pytest.raises(ConfigError, match="loopback"):
        make_runtime(asset("approvals/desk.yaml"), webhooks=path)
