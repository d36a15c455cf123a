"""``warden verify`` over tables it said OK about after an edit (issue 16 fresh-user
review, decisions 913-914): a stored policy bundle's source, the active bundle row, and
an AdCP plan's record. Each is now checked against what a leaf or a digest vouches for;
each test here failed before (verify said OK)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, ensure_agent, run_sql, verify_json
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from warden.policy.activation import activate, read_bundle
from warden.runtime import Runtime
from warden.server.app import create_app

runner = CliRunner()


def _plan(total: int) -> dict[str, Any]:
    return {
        "plan_id": "plan-q2",
        "brand": {"domain": "acmeoutdoor.example"},
        "objectives": "Q2 outdoor lifestyle campaign",
        "budget": {"total": total, "currency": "USD", "reallocation_threshold": total},
        "flight": {"start": "2020-01-01T00:00:00Z", "end": "2099-06-30T23:59:59Z"},
        "countries": ["US"],
    }


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    """A runtime with a synced plan (re-synced once: version 2) and an activation."""
    rt = make_runtime()
    ensure_agent(rt, "buyer-agent")
    _, token = rt.api_keys.create("buyer-agent", "agent")
    with TestClient(create_app(rt)) as client:
        for total in (100000, 90000):
            r = client.post(
                "/adcp/sync_plans",
                json={"idempotency_key": str(uuid.uuid4()), "plans": [_plan(total)]},
                headers={"authorization": f"Bearer {token}"},
            )
            assert r.status_code == 200, r.text
    bundle, source = read_bundle(DEFAULT_POLICY)
    activate(rt.store, bundle, source, by="test")
    yield rt


def _mismatch(rt: Runtime) -> dict[str, Any]:
    code, doc = verify_json(rt)
    assert code == 1 and doc["failure"]["reason"] == "state_mismatch", doc
    failure: dict[str, Any] = doc["failure"]
    return failure


def test_the_untouched_tables_verify(rt: Runtime) -> None:
    code, doc = verify_json(rt)
    assert code == 0 and doc["ok"], doc
    rows = doc["log"]["state_rows"]
    assert rows["adcp_plans"] == 1 and rows["policy_active"] == 1
    assert rows["policy_bundles"] >= 1


def test_an_edited_bundle_source(rt: Runtime) -> None:
    run_sql(rt, "UPDATE policy_bundles SET source = replace(source, 'deny', 'allow')")
    failure = _mismatch(rt)
    assert failure["message"].startswith("policy_bundles row sha256:")
    assert "the stored source hashes to sha256:" in failure["message"]


def test_the_active_bundle_row_edited(rt: Runtime) -> None:
    run_sql(rt, "UPDATE policy_active SET generation = generation + 5")
    failure = _mismatch(rt)
    assert failure["message"].startswith("policy_active row 1: generation is ")


@pytest.mark.parametrize("hash_too", [False, True], ids=["record", "record_and_hash"])
def test_an_edited_plan(rt: Runtime, hash_too: bool) -> None:
    # The plan's total raised in the stored record (what later checks read).
    run_sql(rt, "UPDATE adcp_plans SET record = replace(record, '90000', '900000')")
    if hash_too:
        run_sql(rt, "UPDATE adcp_plans SET plan_hash = 'x' || plan_hash")
    failure = _mismatch(rt)
    assert failure["message"].startswith("adcp_plans row buyer-agent/plan-q2: plan_hash of record")


def test_a_plan_rolled_back_to_its_first_version(rt: Runtime) -> None:
    run_sql(rt, "UPDATE adcp_plans SET version = 1")
    failure = _mismatch(rt)
    assert failure["message"].startswith("adcp_plans row buyer-agent/plan-q2: version is 1")
