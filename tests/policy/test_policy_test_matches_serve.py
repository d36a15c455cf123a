"""``warden policy test`` decides as ``warden serve`` does: every ACS case of every
shipped bundle's tests, sent (with its history) through a real in-process ACS service
as a signed, registered agent, gets the verdict the tester computed — decision, rules
fired, reason codes, modifications. The approval desk and the spend gate are switched
off in the service, as the tester does not run them (docs/policy-testing.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, service_client

from warden.core.hooks import WARDEN_METHODS
from warden.policy import load_bundle
from warden.policytools import PolicyTester, discover_tests, load_tests
from warden.policytools.run import payload_of
from warden.runtime import Runtime

SHIPPED = sorted((ROOT / "examples" / "policies").glob("*.yaml"))


@pytest.mark.parametrize("bundle_path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_tester_verdicts_equal_the_service_verdicts(
    make_runtime: Callable[..., Runtime], bundle_path: Path
) -> None:
    rt = make_runtime(policy=bundle_path)
    rt.acs.approval_gate = None
    rt.acs.spend_gate = None
    tester = PolicyTester(load_bundle(bundle_path))
    compared = 0
    for tests in map(load_tests, discover_tests(bundle_path)):
        for case in tests.cases:
            history = case.session.history if case.session else []
            steps = [*history, case]
            if any(s.method in WARDEN_METHODS for s in steps) or case.expect.error:
                continue  # another wire, or a request the server refuses
            got = tester.outcome(tests, case)
            client = service_client(rt, agent_id=f"agent-{compared}")
            assert "result" in client.hello()
            for step in history:
                assert "result" in client.call(step.method, payload_of(step)), case.name
            answer = client.call(case.method, payload_of(case))
            result = answer["result"]
            live = (
                result["decision"],
                [r["rule_id"] for r in result.get("policy_references", [])],
                result.get("reason_codes", []),
                result.get("modifications"),
            )
            assert live == (
                got.decision,
                list(got.rules),
                list(got.reason_codes),
                got.modifications,
            ), case.name
            compared += 1
    assert compared >= 7
