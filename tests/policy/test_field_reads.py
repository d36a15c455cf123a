"""The CEL field analysis that prunes what the policy engine converts (decision 272).

A rule must never find a field it reads pruned away: the analysis names the fields a
condition selects, and answers None ("read whole") for any other use of the variable.
The engine's decisions with pruning are compared with a context holding every fact.
"""

from __future__ import annotations

from typing import Any

import pytest

from warden.policy.conditions import Condition, field_reads

V = frozenset({"args", "metadata", "tool"})


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("has(args.amount_usd) && double(args.amount_usd) <= 500.0", {"args": {"amount_usd"}}),
        ("args.a.b == 1 && args.c > 2", {"args": {"a", "c"}}),
        (
            'metadata.environment == "production" && tool.name == "args"',
            {"metadata": {"environment"}, "tool": {"name"}},
        ),
        ('args.exists(k, k == "x")', {"args": None}),
        ("size(args) > 2", {"args": None}),
        ('args["x"] == 1', {"args": None}),
        ("has(args)", {"args": None}),
        ("[1].exists(args, args > 0)", {"args": None}),
        ("args.a == 1 && args.c(1)", {"args": None}),
        ("to_json(args).size() > 1", {"args": None}),
        ("args.?x == 1", {"args": None}),
        ("x.args.y == 1 && args.z == 2", {"args": {"z"}}),
    ],
)
def test_selections_are_found_and_any_other_use_reads_whole(
    source: str, expected: dict[str, Any]
) -> None:
    found = field_reads(source, frozenset(expected))
    assert found == {k: (frozenset(v) if v is not None else None) for k, v in expected.items()}


def test_a_variable_read_without_a_visible_selection_is_read_whole() -> None:
    assert field_reads("true", frozenset({"args"})) == {"args": None}


@pytest.mark.parametrize(
    "source",
    [
        "has(args.amount_usd) && double(args.amount_usd) > 100.0",
        'has(args.to) && args.to.startsWith("acct-")',
        'args.exists(k, k == "memo") && size(args) == 4',
        'has(metadata.environment) && metadata.environment == "production"',
        'has(args.missing) || args.currency == "USD"',
    ],
)
def test_a_pruned_context_evaluates_as_the_whole_one(source: str) -> None:
    cond = Condition(source)
    facts = {
        "args": {"amount_usd": 2500.0, "currency": "USD", "to": "acct-42", "memo": "m"},
        "metadata": {"environment": "production", "agent_id": "a", "session_id": "s"},
    }
    pruned = {}
    for name in cond.variables:
        keep = cond.fields.get(name)
        value = facts[name]
        pruned[name] = value if keep is None else {k: value[k] for k in keep if k in value}
    assert cond.evaluate(pruned) == cond.evaluate({n: facts[n] for n in cond.variables})
