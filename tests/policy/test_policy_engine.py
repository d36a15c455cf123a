"""How fired rules combine into one decision, glob matching, and the rule index.

Requests are built by the ACS wire parser (``action_request``), as in production.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
import yaml

from warden.core.guardian import Guardian
from warden.core.types import ActionRequest, Effect
from warden.errors import CouldNotDecide
from warden.policy import PolicyEngine, parse_bundle
from warden.wire.acs.methods import route
from warden.wire.acs.parse import action_request
from warden.wire.acs.render import verdict_result

SESSION = "6a0c3a8e-2f57-4f3c-9d1e-0c7d2c1b0a01"

DETAILS: dict[str, dict[str, Any]] = {
    "allow": {},
    "modify": {"reasoning": "m", "modify": {"parameter_overrides": {"limit": 10}}},
    "defer": {
        "reasoning": "d",
        "defer": {
            "reason": "insufficient_context",
            "resolution_method": "human_approval",
            "resolution_timeout_ms": 1000,
        },
    },
    "ask": {
        "reasoning": "a",
        "ask": {
            "question": "ok?",
            "approver": {"type": "human", "id": "desk"},
            "timeout_seconds": 60,
        },
    },
    "deny": {"reasoning": "n"},
}
ORDER = ["allow", "modify", "defer", "ask", "deny"]


def bundle_text(rules: list[dict[str, Any]], **top: Any) -> str:
    doc = {"warden_bundle": 1, "id": "t", "version": "3", "name": "Test", **top, "rules": rules}
    return yaml.safe_dump(doc, sort_keys=False)


def engine(rules: list[dict[str, Any]], **top: Any) -> PolicyEngine:
    return PolicyEngine(parse_bundle(bundle_text(rules, **top), source="test.yaml"))


def request(method: str, payload: dict[str, Any]) -> ActionRequest:
    params = {
        "acs_version": "0.1.0",
        "request_id": str(uuid.uuid4()),
        "timestamp": "2026-11-29T12:00:00Z",
        "metadata": {"agent_id": "agent-a", "session_id": SESSION},
        "payload": payload,
    }
    return action_request(route(method), params, None)


def tool_call(name: str, **args: Any) -> ActionRequest:
    return request(
        "steps/toolCallRequest",
        {"tool": {"name": name}, "arguments": {k: {"value": v} for k, v in args.items()}},
    )


def mcp_call(name: str, **args: Any) -> ActionRequest:
    return request(
        "protocols/MCP/tools/call",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": args},
        },
    )


def rule(rid: str, effect: str, **kw: Any) -> dict[str, Any]:
    return {"id": rid, "tools": ["*"], "effect": effect, **DETAILS[effect], **kw}


def fired_ids(ev: Any) -> list[str]:
    return [r.rule_id for r in ev.references]


# -- combining ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weak", "strong"),
    list(itertools.combinations(ORDER, 2)),
    ids=[f"{a}<{b}" for a, b in itertools.combinations(ORDER, 2)],
)
@pytest.mark.parametrize("strong_first", [False, True], ids=["weak_first", "strong_first"])
def test_strongest_effect_wins_and_all_fired_are_cited(
    weak: str, strong: str, strong_first: bool
) -> None:
    rules = [rule(f"r-{weak}", weak), rule(f"r-{strong}", strong)]
    if strong_first:
        rules.reverse()
    ev = engine(rules).evaluate(tool_call("anything"))
    assert ev.effect is Effect(strong)
    assert fired_ids(ev) == [r["id"] for r in rules]
    assert all(
        (ref.policy_id, ref.policy_version, ref.policy_name) == ("t", "3", "Test")
        for ref in ev.references
    )
    assert ev.reasoning == DETAILS[strong].get("reasoning", "")
    assert ev.default_applied is False


def test_winner_reasoning_and_codes_come_from_winning_rules_only() -> None:
    eng = engine(
        [
            rule("base", "allow", reason_codes=["ok"]),
            rule("ask-pay", "ask", tools=["pay_*"], reason_codes=["needs_human"]),
            rule("big", "deny", tools=["pay_*"], when="args.amount > 1000",
                 reasoning="Too big.", reason_codes=["over_limit"]),
            rule("blocked", "deny", tools=["pay_*"], when="args.to == 'mallory'",
                 reasoning="Blocked payee.", reason_codes=["blocked_payee", "over_limit"]),
        ]
    )  # fmt: skip
    ev = eng.evaluate(tool_call("pay_invoice", amount=5000, to="mallory"))
    assert ev.effect is Effect.DENY
    assert fired_ids(ev) == ["base", "ask-pay", "big", "blocked"]
    assert ev.reasoning == "Too big.; Blocked payee."
    assert ev.reason_codes == ("over_limit", "blocked_payee")
    small = eng.evaluate(tool_call("pay_invoice", amount=5, to="bob"))
    assert (small.effect, fired_ids(small), small.reason_codes) == (
        Effect.ASK,
        ["base", "ask-pay"],
        ("needs_human",),
    )
    assert small.ask_details == {
        "question": "ok?",
        "approver": {"type": "human", "id": "desk"},
        "timeout_seconds": 60,
        "timeout_disposition": "deny",
    }


def test_no_rule_matched_is_deny() -> None:
    ev = engine([rule("reads", "allow", tools=["read_*"])]).evaluate(tool_call("shell"))
    assert (ev.effect, ev.reason_codes, ev.references, ev.default_applied) == (
        Effect.DENY,
        ("no_rule_matched",),
        (),
        True,
    )
    assert ev.reasoning == "No policy rule matched this step."
    verdict = Guardian(engine([rule("reads", "allow", tools=["read_*"])])).decide(
        tool_call("shell")
    )
    assert (verdict.decision, verdict.reason_codes) == (Effect.DENY, ("no_rule_matched",))


def test_default_allow_is_honoured() -> None:
    eng = engine(
        [rule("no-shell", "deny", tools=["shell"])],
        default="allow",
        default_reasoning="Open by default.",
    )
    ev = eng.evaluate(tool_call("read_file"))
    assert (ev.effect, ev.reason_codes, ev.references, ev.default_applied, ev.reasoning) == (
        Effect.ALLOW,
        ("default_allow",),
        (),
        True,
        "Open by default.",
    )
    assert eng.evaluate(tool_call("shell")).effect is Effect.DENY


def test_warn_flags_an_allow_and_renders_policy_warning() -> None:
    eng = engine([rule("tools", "allow"), rule("curl", "allow", tools=["curl"], warn=True)])
    quiet = eng.evaluate(tool_call("wget"))
    loud = eng.evaluate(tool_call("curl"))
    assert (quiet.effect, quiet.warn) == (Effect.ALLOW, False)
    assert (loud.effect, loud.warn, fired_ids(loud)) == (Effect.ALLOW, True, ["tools", "curl"])
    verdict = Guardian(eng).decide(tool_call("curl"))
    result = verdict_result(
        verdict, acs_version="0.1.0", request_id=SESSION, chain_hash=None, duration_ms=0
    )
    assert result["decision"] == "allow"
    assert result["reason_codes"] == ["policy_warning"]


def test_warn_is_dropped_when_a_stronger_effect_wins() -> None:
    eng = engine([rule("curl", "allow", tools=["curl"], warn=True), rule("no", "deny")])
    ev = eng.evaluate(tool_call("curl"))
    assert (ev.effect, ev.warn) == (Effect.DENY, False)


MODIFY_RULES = [
    rule("tools", "allow"),
    rule("scrub", "modify", tools=["http_*"], when="has(args.token)", reason_codes=["scrubbed"],
         modify={"redactions": [{"path": "/arguments/token/value"}]}),
    rule("cap", "modify", tools=["http_*"], when="has(args.limit)", reason_codes=["capped"],
         modify={"parameter_overrides": {"limit": 10}}),
    rule("cap-post", "modify", tools=["http_post"], when="has(args.limit)",
         modify={"parameter_overrides": {"limit": 5}}),
    rule("same-cap", "modify", tools=["http_get"], when="has(args.limit)",
         modify={"parameter_overrides": {"limit": 10}}),
    rule("scrub-limit", "modify", tools=["http_put"], when="has(args.limit)",
         modify={"redactions": [{"path": "/arguments/limit/value"}]}),
]  # fmt: skip


def test_modify_rules_merge() -> None:
    ev = engine(MODIFY_RULES).evaluate(tool_call("http_get", token="s3cret", limit=500))
    assert ev.effect is Effect.MODIFY
    assert fired_ids(ev) == ["tools", "scrub", "cap", "same-cap"]
    assert ev.modifications == {
        "redactions": [{"path": "/arguments/token/value"}],
        "parameter_overrides": {"limit": 10},
    }
    assert ev.reason_codes == ("scrubbed", "capped")


def test_conflicting_modify_rules_cannot_decide() -> None:
    eng = engine(MODIFY_RULES)
    with pytest.raises(CouldNotDecide) as info:
        eng.evaluate(tool_call("http_post", limit=500))
    assert info.value.reason == "evaluation_failed"
    assert "'limit'" in info.value.message
    verdict = Guardian(eng).decide(tool_call("http_post", limit=500))
    assert (verdict.decision, verdict.reason_codes) == (Effect.DENY, ("evaluation_failed",))
    assert verdict.modifications is None
    assert verdict.failure is not None and "'limit'" in verdict.failure


def test_merged_modifications_that_overlap_cannot_decide() -> None:
    """Each rule is fit on its own, but together they edit the same field (§6.3)."""
    eng = engine(MODIFY_RULES)
    with pytest.raises(CouldNotDecide) as info:
        eng.evaluate(tool_call("http_put", limit=500))
    assert "§6.3" in info.value.message
    verdict = Guardian(eng).decide(tool_call("http_put", limit=500))
    assert (verdict.decision, verdict.reason_codes) == (Effect.DENY, ("evaluation_failed",))


def test_condition_error_fails_closed() -> None:
    eng = engine([rule("tools", "allow"), rule("limit", "deny", when="args.amount > 1000")])
    with pytest.raises(CouldNotDecide) as info:
        eng.evaluate(tool_call("send_money", to="bob"))
    assert info.value.data["rule_id"] == "limit"
    verdict = Guardian(eng).decide(tool_call("send_money", to="bob"))
    assert (verdict.decision, verdict.reason_codes) == (Effect.DENY, ("evaluation_failed",))
    assert verdict.policy_references == ()


def test_non_bool_condition_fails_closed() -> None:
    eng = engine([rule("tools", "allow", when="args.amount")])
    verdict = Guardian(eng).decide(tool_call("send_money", amount=3))
    assert (verdict.decision, verdict.reason_codes) == (Effect.DENY, ("evaluation_failed",))
    assert verdict.failure is not None and "bool" in verdict.failure


def test_guarded_condition_does_not_error() -> None:
    eng = engine(
        [
            rule("tools", "allow"),
            rule("limit", "deny", when="has(args.amount) && args.amount > 1000"),
        ]
    )
    assert eng.evaluate(tool_call("send_money", to="bob")).effect is Effect.ALLOW
    assert eng.evaluate(tool_call("send_money", amount=1001)).effect is Effect.DENY


@pytest.mark.parametrize(
    ("method", "payload", "policy", "decision"),
    [
        ("steps/sessionStart", {}, "ask", "deny"),
        ("steps/sessionEnd", {}, "deny", "allow"),
        ("steps/postCompact", {}, "deny", "allow"),
    ],
)
def test_effect_the_hook_does_not_permit_is_substituted(
    method: str, payload: dict[str, Any], policy: str, decision: str
) -> None:
    eng = engine([{**rule("r", policy), "hooks": [method], "tools": None}])
    verdict = Guardian(eng).decide(request(method, payload))
    assert verdict.decision is Effect(decision)
    assert verdict.reason_codes[-1] == "disposition_not_permitted"
    assert verdict.policy_data == {"substituted_from": policy}
    assert verdict.ask_details is None and verdict.modifications is None


# -- matching -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "fires"),
    [
        ("schedule_transfer", True),
        ("schedule_", True),
        ("reschedule_transfer", False),  # globs are anchored
        ("Schedule_transfer", True),  # and caseless (issue 14; case_sensitive opts out)
        ("SEND_MONEY", True),
        ("send_money", True),
        ("send_money_now", False),
        ("file_a", True),
        ("file_ab", False),  # ? is one character
        ("db_drop", True),
        ("db_dump", False),  # [ro] is a set
        ("", False),  # a step without a tool never matches a tools rule
    ],
)
def test_tool_globs(tool: str, fires: bool) -> None:
    eng = engine(
        [rule("x", "deny", tools=["schedule_*", "send_money", "file_?", "db_d[ro]op"])],
        default="allow",
    )
    ev = eng.evaluate(tool_call(tool))
    assert fired_ids(ev) == (["x"] if fires else [])
    assert ev.effect is (Effect.DENY if fires else Effect.ALLOW)


def test_tools_rule_defaults_to_tool_methods_and_covers_mcp() -> None:
    eng = engine([rule("no-shell", "deny", tools=["shell"])], default="allow")
    assert eng.evaluate(tool_call("shell")).effect is Effect.DENY
    assert eng.evaluate(mcp_call("shell", cmd="ls")).effect is Effect.DENY
    assert eng.evaluate(request("steps/sessionStart", {})).effect is Effect.ALLOW


def test_hook_globs_and_tool_less_steps() -> None:
    eng = engine(
        [
            {"id": "mcp", "hooks": ["protocols/MCP/*"], "effect": "deny", "reasoning": "no"},
            {"id": "start", "hooks": ["steps/session*"], "tools": ["*"], "effect": "deny",
             "reasoning": "never: sessionStart carries no tool"},
        ],
        default="allow",
    )  # fmt: skip
    assert fired_ids(eng.evaluate(mcp_call("anything"))) == ["mcp"]
    assert eng.evaluate(request("steps/sessionStart", {})).effect is Effect.ALLOW
    assert eng.evaluate(tool_call("anything")).effect is Effect.ALLOW


def test_mcp_arguments_are_visible_as_sent() -> None:
    eng = engine([rule("big", "deny", when="has(args.n) && args.n > 2")], default="allow")
    assert eng.evaluate(mcp_call("count", n=3)).effect is Effect.DENY
    assert eng.evaluate(mcp_call("count", n=1)).effect is Effect.ALLOW


def test_conditions_see_documented_variables() -> None:
    eng = engine(
        [
            rule("v", "deny", when=(
                "method == 'steps/toolCallRequest' && tool.name == 'mv' && args.src == 'a' "
                "&& raw_command == 'mv a b' && payload.tool.name == 'mv' "
                "&& metadata.agent_id == 'agent-a' && session.id == '" + SESSION + "' "
                "&& session.step_count == 0 && data.k == 1"
            )),
        ],
        default="allow",
        data={"k": 1},
    )  # fmt: skip
    req = request(
        "steps/toolCallRequest",
        {"tool": {"name": "mv"}, "arguments": {"src": {"value": "a"}}, "raw_command": "mv a b"},
    )
    assert fired_ids(eng.evaluate(req)) == ["v"]


# -- the index ----------------------------------------------------------------------------


def test_index_returns_only_rules_that_can_match() -> None:
    rules = [rule(f"other-{i:02d}", "deny", tools=[f"tool_{i:02d}"]) for i in range(99)]
    rules.insert(50, rule("target", "ask", tools=["send_money"]))
    eng = engine(rules, default="allow")
    assert len(eng.bundle.rules) == 100
    candidates = eng._index.candidates("steps/toolCallRequest", "send_money")
    assert [r.id for r in candidates] == ["target"]
    assert [r.id for r in eng._index.candidates("protocols/MCP/tools/call", "tool_07")] == [
        "other-07"
    ]
    assert eng._index.candidates("steps/sessionStart", "") == ()
    assert eng._index.candidates("steps/toolCallRequest", "unknown") == ()
    ev = eng.evaluate(tool_call("send_money"), explain=True)
    assert [t.rule_id for t in ev.trace] == ["target"]
    assert ev.effect is Effect.ASK


def test_index_keeps_bundle_order_across_globs() -> None:
    eng = engine(
        [
            rule("c", "allow", tools=["pay_*"]),
            rule("a", "allow", tools=["other"]),
            rule("b", "deny", tools=["*_invoice"]),
            rule("d", "allow"),
        ]
    )
    assert [r.id for r in eng._index.candidates("steps/toolCallRequest", "pay_invoice")] == [
        "c",
        "b",
        "d",
    ]


def test_a_repeated_evaluation_is_the_same_and_explain_still_traces() -> None:
    # The engine shares the Evaluation of an allow or deny between requests that fire
    # the same rules (decision 745); what each caller gets must not change by it.
    eng = engine(
        [
            {"id": "allow-read", "tools": ["read_file"], "effect": "allow"},
            {
                "id": "deny-secrets",
                "tools": ["read_file"],
                "when": "args.path.startsWith('/etc/')",
                "effect": "deny",
                "reasoning": "no",
                "reason_codes": ["secret_path"],
            },
            {"id": "ask-write", "tools": ["write_file"], **DETAILS["ask"], "effect": "ask"},
        ]
    )
    read = tool_call("read_file", path="/srv/a")
    secret = tool_call("read_file", path="/etc/shadow")
    first, again = eng.evaluate(read), eng.evaluate(read)
    assert first == again and first.effect is Effect.ALLOW and first.trace == ()
    denied = eng.evaluate(secret)
    assert denied.effect is Effect.DENY and denied.reason_codes == ("secret_path",)
    assert [r.rule_id for r in denied.references] == ["allow-read", "deny-secrets"]
    explained = eng.evaluate(read, explain=True)
    assert [t.rule_id for t in explained.trace] == ["allow-read", "deny-secrets"]
    assert eng.evaluate(read).trace == ()
    # An ask's details are the caller's own to change: never shared.
    write = tool_call("write_file", path="/srv/a")
    one = eng.evaluate(write)
    assert one.ask_details is not None
    one.ask_details["question"] = "changed"
    assert eng.evaluate(write).ask_details["question"] == "ok?"


@pytest.mark.parametrize("effect", ["ask", "defer"])
def test_repeated_asks_and_defers_are_equal_and_each_has_its_own_details(effect: str) -> None:
    # Decision 891: an ask's or defer's Evaluation is shared too, but each caller gets
    # its own details dict; every field but that one is the first evaluation's.
    eng = engine([{"id": "r", "tools": ["write_file"], **DETAILS[effect], "effect": effect}])
    write = tool_call("write_file", path="/srv/a")
    attr = f"{effect}_details"
    first, second, third = (eng.evaluate(write) for _ in range(3))
    assert first == second == third
    assert first.effect is Effect(effect) and first.trace == ()
    assert second.references is first.references  # built once, shared
    wire = dict(getattr(first, attr))
    assert {k: wire[k] for k in DETAILS[effect][effect]} == DETAILS[effect][effect]
    dicts = [getattr(e, attr) for e in (first, second, third)]
    assert len({id(d) for d in dicts}) == 3
    dicts[0]["reason"] = dicts[1]["question"] = "changed"
    dicts[1].clear()
    assert getattr(third, attr) == wire
    assert getattr(eng.evaluate(write), attr) == wire
    assert eng.evaluate(write, explain=True).trace[0].rule_id == "r"
