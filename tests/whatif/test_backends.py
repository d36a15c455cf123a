"""The log reader, activation and the replicas' poll on both store backends (SQLite and
PostgreSQL): what-if replay reads the same history, an activation reaches a second
replica of the same database (issue 19)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, service_client
from dojo import send_money_candidate

from warden.policy.activation import activate, read_bundle
from warden.runtime import Runtime
from warden.whatif import what_if
from warden.whatif.reader import StoreLogReader

NEW_PAYEE = {"recipient": "XX00NEWPAYEE", "amount": 10, "subject": "rent", "date": "2026-12-01"}


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def test_replay_and_activation_on_each_backend(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    first = make_runtime(AGENTDOJO_POLICY, policy_poll_interval_s=0)
    second = make_runtime(AGENTDOJO_POLICY, policy_poll_interval_s=0)
    client = service_client(first)
    client.hello()
    decisions = [
        client.tool_call(tool, args)["result"]["decision"]
        for tool, args in (("send_money", NEW_PAYEE), ("get_balance", {}))
    ]
    assert decisions == ["ask", "allow"]
    bundle, source = read_bundle(send_money_candidate(tmp_path))
    doc = what_if(StoreLogReader(first.store.engine, "test"), bundle)
    # hello is no entry; the two calls are, both reproduced by the stored bundle.
    assert doc["decisions"] == 2 and doc["faithfulness"]["reproduced"] == 2
    assert doc["matrix"] == {"ask": {"allow": 1}, "allow": {"allow": 1}}
    assert activate(first.store, bundle, source, by="test") == 1
    assert activate(first.store, bundle, source, by="test") == 2  # generations count
    for rt in (first, second):
        assert rt.follower is not None and rt.follower.check() is True
        assert rt.guardian.engine.bundle.ref.digest == bundle.ref.digest
        assert rt.follower.check() is False  # already current
    assert client.tool_call("send_money", NEW_PAYEE)["result"]["decision"] != "ask"
