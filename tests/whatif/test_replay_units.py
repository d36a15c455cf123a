"""Replay's pieces on their own: what a recorded verdict says about the policy behind it,
how changes are classified, and provenance state folded from the log (issue 19)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import ROOT

from warden.policy.bundle import load_bundle
from warden.replay.agentdojo import ReplaySummary, replay_task
from warden.replay.agentdojo_tasks import load_task_runs
from warden.runtime import Runtime
from warden.whatif import what_if
from warden.whatif.reader import StoreLogReader
from warden.whatif.replay import Outcome, change_kind, recorded_outcome, reproduces
from warden.wire.acs.client import AcsClient

#: Issue 8's provenance bundle (session-wide taint), kept by issue 20 as the strict
#: variant: the banking ground truth makes it ask, so there are gate asks to fold and
#: loosen (the shipped bundle's per-argument taint lets those benign runs through).
PROVENANCE_POLICY = ROOT / "tests" / "replay" / "agentdojo-provenance-strict.yaml"


def refs(*ids: str) -> list[dict[str, str]]:
    return [{"policy_id": "b", "policy_version": "1", "rule_id": i} for i in ids]


def test_marks_of_state_policy_does_not_compute() -> None:
    budget = {
        "decision": "deny",
        "reason_codes": ["budget_exceeded"],
        "policy_references": refs("pay"),
        "spend": {"refused": "budget_exceeded"},
    }
    out, mark = recorded_outcome(budget)
    assert (out.decision, out.rules, mark) == ("deny", ("pay",), "budget")
    assert reproduces(out, mark, Outcome("allow", ("pay",)))
    assert not reproduces(out, mark, Outcome("ask", ("pay",)))
    assert not reproduces(out, mark, Outcome("allow", ("other",)))
    granted = {
        "decision": "allow",
        "reason_codes": ["approval_granted"],
        "policy_references": refs("x"),
    }
    out, mark = recorded_outcome(granted)
    assert mark == "human" and reproduces(out, mark, Outcome("ask", ("x",), ("c",)))
    assert not reproduces(out, mark, Outcome("allow", ("x",)))
    # A pending ask keeps its decision: the gate's code is not policy's.
    pending = {
        "decision": "ask",
        "reason_codes": ["c", "approval_pending"],
        "policy_references": refs("x"),
    }
    out, mark = recorded_outcome(pending)
    assert (out, mark) == (Outcome("ask", ("x",), ("c",)), None)
    out, mark = recorded_outcome({"decision": "deny", "reason_codes": ["chain_mismatch"]})
    assert mark == "preempted"
    plain = {"decision": "deny", "reason_codes": ["no_rule_matched"]}
    out, mark = recorded_outcome(plain)
    assert mark is None and not reproduces(out, mark, Outcome("deny", (), ("other",)))


def test_change_kinds() -> None:
    assert change_kind(Outcome("ask"), Outcome("allow")) == "loosened"
    assert change_kind(Outcome("deny"), Outcome("ask")) == "loosened"
    assert change_kind(Outcome("allow"), Outcome("modify")) == "tightened"
    assert change_kind(Outcome("allow", ("a",)), Outcome("allow", ("b",))) == "rules"
    assert change_kind(Outcome("allow", ("a", "b")), Outcome("allow", ("b", "a"))) is None


def test_provenance_state_is_folded_from_the_log(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    """With a provenance bundle each step is judged on the session graph as the log built
    it: the recorded bundle reproduces every decision (asks included: untrusted data
    reached a consequential call), and a candidate without the provenance gates loosens
    exactly the steps the gates had tightened."""
    rt = make_runtime(PROVENANCE_POLICY, sqlite_sync="NORMAL", policy_poll_interval_s=0)
    assert rt.agents is not None
    _, cred = rt.agents.add("demo-agent", "demo-owner")
    summary = ReplaySummary()
    for run in load_task_runs("v1.2", ["banking"]):
        replay_task(AcsClient.for_agent(rt.acs.handle, cred), run, summary)
    assert summary.errors == 0
    asked = summary.row(None)["ask"]
    assert asked > 0
    reader = StoreLogReader(rt.store.engine, "test")
    doc = what_if(reader, load_bundle(PROVENANCE_POLICY))
    f = doc["faithfulness"]
    assert f["faithful"] and f["reproduced"] == doc["decisions"] > 0
    assert doc["matrix"]["ask"] == {"ask": asked}
    # The same bundle without its provenance section (its last): every step is allowed
    # by rule, so exactly the asks the gates made become allows.
    text = PROVENANCE_POLICY.read_text(encoding="utf-8")
    head, found, _ = text.partition("\nprovenance:")
    assert found
    no_gates = tmp_path / "no-provenance.yaml"
    no_gates.write_text(head + "\n", encoding="utf-8")
    candidate = load_bundle(no_gates)
    assert candidate.provenance is None
    changed = what_if(reader, candidate)
    assert changed["faithfulness"]["faithful"]
    assert (changed["changes"]["loosened"], changed["changes"]["tightened"]) == (asked, 0)
    assert changed["matrix"]["ask"] == {"allow": asked}


def test_an_approvers_answer_is_marked_and_compared_at_the_policy_level(
    make_runtime: Callable[..., Runtime],
) -> None:
    """A granted ask was recorded as allow (approval_granted): the recorded bundle's
    replay says ask, which the grant explains, so it is reproduced and marked human."""
    from conftest import AGENTDOJO_POLICY, service_client

    from warden.identity.api_keys import Role

    rt = make_runtime(AGENTDOJO_POLICY, policy_poll_interval_s=0)
    agent = service_client(rt)
    agent.hello()
    args = {"password": "n3w-secret"}
    asked = agent.tool_call("update_password", args)["result"]
    assert asked["decision"] == "ask"
    alice, _ = rt.api_keys.create("alice", Role.APPROVER, ["account-owner"])
    rt.desk.approve(asked["ask_details"]["task_id"], alice, "I asked for it")
    granted = agent.tool_call("update_password", args)["result"]
    assert granted["decision"] == "allow" and "approval_granted" in granted["reason_codes"]
    doc = what_if(StoreLogReader(rt.store.engine, "test"), load_bundle(AGENTDOJO_POLICY))
    f = doc["faithfulness"]
    assert f["faithful"] and f["reproduced"] == doc["decisions"] == 2
    assert f["marked"] == {"human": 1}
    assert doc["matrix"] == {"ask": {"ask": 2}}  # both steps: policy asked
    (marked,) = doc["marked"]
    assert (marked["recorded"]["decision"], marked["old"]["decision"]) == ("allow", "ask")
