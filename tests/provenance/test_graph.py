"""The provenance graph as a value: trust rules, lineage, summary, intent fixing, and
client-sent lineage that is long or cyclic (no recursion to exhaust)."""

from __future__ import annotations

from typing import Any

from warden.provenance.config import ProvenanceSpec
from warden.provenance.graph import SessionProvenance
from warden.provenance.model import Trust

SPEC = ProvenanceSpec(trusted_sources=["get_iban"])


def step(method: str, rid: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": rid, "payload": payload}


def out(tool: str, value: Any, pid: str | None = None, **prov: Any) -> dict[str, Any]:
    o: dict[str, Any] = {"value": value}
    if pid is not None:
        o["provenance"] = {"provenance_id": pid, "origin": "tool_output", "source_id": tool, **prov}
    return {"tool": {"name": tool}, "exit_status": "success", "outputs": [o]}


def test_trust_follows_origin_source_and_lineage() -> None:
    s = SessionProvenance()
    s = s.applied(
        "steps/userMessage", step("", "r1", {"content": [{"type": "text", "value": "hi"}]}), "allow"
    )
    s = s.applied("steps/toolCallResult", step("", "r2", out("read_file", "x", "o1")), "allow")
    s = s.applied("steps/toolCallResult", step("", "r3", out("get_iban", "DE1", "o2")), "allow")
    s = s.applied("steps/toolCallResult", step("", "r4", out("read_file", "y")), "deny")
    u = "warden:r1:content/0"
    assert s.nodes[u].origin == "user_input" and s.nodes[u].assigned
    assert s.trust(u, SPEC) is Trust.TRUSTED
    assert s.trust("o1", SPEC) is Trust.UNTRUSTED
    assert s.trust("o2", SPEC) is Trust.TRUSTED  # a trusted source
    assert s.trust("nope", SPEC) is Trust.UNKNOWN
    assert "warden:r4:outputs/0" not in s.nodes  # a denied output never entered
    args = {
        "a": {
            "value": 1,
            "provenance": {
                "provenance_id": "g1",
                "origin": "agent_generated",
                "derived_from": [u, "o1"],
            },
        },
        "b": {"value": 2, "provenance": {"provenance_id": "g2", "origin": "agent_generated"}},
        # a user_input claim deriving from untrusted data is still untrusted (monotone)
        "c": {
            "value": 3,
            "provenance": {"provenance_id": "g3", "origin": "user_input", "derived_from": ["o1"]},
        },
    }
    s = s.applied(
        "steps/toolCallRequest", step("", "r5", {"tool": {"name": "t"}, "arguments": args}), "allow"
    )
    assert s.trust("g1", SPEC) is Trust.UNTRUSTED
    assert s.lineage("g1") == ["g1", u, "o1"]
    assert s.trust("g2", SPEC) is Trust.UNKNOWN
    assert s.trust("g3", SPEC) is Trust.UNTRUSTED
    summary = s.summary()
    assert summary["origins_seen"] == ["user_input", "tool_output", "agent_generated"]
    assert summary["entry_count"] == 6 and summary["max_lineage_depth"] == 1
    assert summary["earliest_step_id_by_origin"]["tool_output"] == "r2"
    assert [n.provenance_id for n in s.entered(SPEC)] == ["o1"]


def test_long_and_cyclic_lineage() -> None:
    s = SessionProvenance()
    s = s.applied(
        "steps/toolCallResult",
        step("", "r0", out("read_file", "x", "p0", derived_from=["p4999"])),
        "allow",
    )
    args = {
        f"a{i}": {
            "value": i,
            "provenance": {
                "provenance_id": f"p{i}",
                "origin": "agent_generated",
                "derived_from": [f"p{i - 1}"],
            },
        }
        for i in range(1, 5000)
    }
    s = s.applied(
        "steps/toolCallRequest", step("", "r1", {"tool": {"name": "t"}, "arguments": args}), "allow"
    )
    assert s.trust("p4999", SPEC) is Trust.UNTRUSTED
    assert len(s.lineage("p4999")) == 5000
    # One cycle through all 5000 nodes: edges inside a cycle count 0 (the depth is the
    # longest chain between strongly connected components).
    assert s.summary()["max_lineage_depth"] == 0
    # An acyclic chain of the same length counts every edge.
    t = SessionProvenance().applied(
        "steps/toolCallResult", step("", "r0", out("read_file", "x", "q0")), "allow"
    )
    chain = {
        f"a{i}": {
            "value": i,
            "provenance": {
                "provenance_id": f"q{i}",
                "origin": "agent_generated",
                "derived_from": [f"q{i - 1}"],
            },
        }
        for i in range(1, 5000)
    }
    t = t.applied(
        "steps/toolCallRequest",
        step("", "r1", {"tool": {"name": "t"}, "arguments": chain}),
        "allow",
    )
    assert t.summary()["max_lineage_depth"] == 4999
    assert t.trust("q4999", SPEC) is Trust.UNTRUSTED


def test_intent_is_fixed_once() -> None:
    intent = {"raw": "pay", "parsed": [{"tool": "send_money"}]}
    s = SessionProvenance().applied(
        "steps/sessionStart", step("", "r1", {"intent": intent}), "allow"
    )
    assert s.intent is not None and s.intent.step_id == "r1"
    later = {"raw": "anything", "parsed": [{"tool": "*"}]}
    s2 = s.applied(
        "steps/agentTrigger",
        step("", "r2", {"trigger_type": "user_message", "intent": later}),
        "allow",
    )
    assert s2.intent == s.intent and s2.intent_window_closed
    # Without an intent at sessionStart, only the first agentTrigger may set one.
    t = SessionProvenance().applied(
        "steps/agentTrigger", step("", "r1", {"trigger_type": "system"}), "allow"
    )
    t = t.applied(
        "steps/agentTrigger",
        step("", "r2", {"trigger_type": "user_message", "intent": later}),
        "allow",
    )
    assert t.intent is None

    # A second sessionStart (nothing else in between) comes too late as well.
    u = SessionProvenance().applied("steps/sessionStart", step("", "r1", {}), "allow")
    assert u.may_set_intent("steps/agentTrigger")
    u = u.applied("steps/sessionStart", step("", "r2", {"intent": later}), "allow")
    assert u.intent is None and not u.may_set_intent("steps/agentTrigger")
