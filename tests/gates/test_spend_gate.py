"""The spend gate's pricing: which charge applies to a tool call, what it costs, in which
currency, charged to which budget — and every way pricing fails closed (issue 3 item 6).

The gate is the one a Runtime builds for tests/assets/policy/spend_policy.yaml; holds,
settlements and the wire are tested through the ACS service in tests/wire/test_acs_spend.py.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, asset

from warden.core.types import ActionRequest
from warden.gates.spend import Price, SpendGate, Unpriced, to_amount
from warden.policy import parse_bundle
from warden.runtime import Runtime
from warden.spend.money import MoneyError


@pytest.fixture
def gate(make_runtime: Callable[..., Runtime]) -> SpendGate:
    rt = make_runtime(policy=asset("policy/spend_policy.yaml"))
    assert rt.acs.spend_gate is not None
    return rt.acs.spend_gate


def call(
    tool: str,
    args: dict[str, Any],
    *,
    agent: str = "shopper",
    method: str = "steps/toolCallRequest",
) -> ActionRequest:
    return ActionRequest(
        method=method,
        payload={},
        metadata={"agent_id": agent, "session_id": "s"},
        tool={"name": tool, "version": "", "provider": "", "operation": "", "capability": ""},
        args=args,
        raw_command="",
        session={"id": "s", "agent_id": agent, "step_count": 3},
    )


def priced(gate: SpendGate, request: ActionRequest) -> tuple[str, Decimal, str, str]:
    result = gate.price(request)
    assert isinstance(result, Price), result
    return result.charge.id, result.amount, result.currency, result.budget_id


def test_no_spend_section_builds_no_gate(make_runtime: Callable[..., Runtime]) -> None:
    assert make_runtime(policy=DEFAULT_POLICY).acs.spend_gate is None


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("40.50", Decimal("40.50")),
        ("7", Decimal("7")),
        (12, Decimal("12")),
        (98.7, Decimal("98.7")),  # the decimal the JSON number spelled, not 98.700000000000003
        (0.01, Decimal("0.01")),
        (1e-6, Decimal("0.000001")),
    ],
)
def test_amount_argument_with_currency_argument_and_mapped_budget(
    gate: SpendGate, amount: Any, expected: Decimal
) -> None:
    got = priced(gate, call("pay", {"amount": amount, "currency": "USD"}))
    assert got == ("payments", expected, "USD", "shop.ops.shopper")
    assert str(got[1]) == str(expected)


def test_price_table_fixed_price_and_computed_amount(gate: SpendGate) -> None:
    assert priced(gate, call("api_call", {})) == (
        "price-list",
        Decimal("0.25"),
        "USD",
        "shop.ops.shopper",
    )
    assert priced(gate, call("search", {"q": "x"}))[:2] == ("price-list", Decimal(1))
    assert priced(gate, call("flash", {}))[:2] == ("flash-sale", Decimal(2))
    assert priced(gate, call("buy", {"quantity": 3}))[:2] == ("orders", Decimal(30))


def test_when_decides_whether_a_charge_applies(gate: SpendGate) -> None:
    assert gate.price(call("transfer", {"amount": 5, "internal": True})) is None
    assert priced(gate, call("transfer", {"amount": 5, "internal": False}))[:2] == (
        "external-transfers",
        Decimal(5),
    )
    assert priced(gate, call("transfer", {"amount": 5}))[0] == "external-transfers"


def test_unpriced_tools_and_other_methods_cost_nothing(gate: SpendGate) -> None:
    assert gate.price(call("lookup", {"amount": 5})) is None
    assert gate.price(call("", {})) is None
    for method in ("steps/toolCallResult", "steps/userMessage", "protocols/MCP/tools/list"):
        assert gate.price(call("pay", {"amount": 5, "currency": "USD"}, method=method)) is None


def test_wrapped_mcp_tools_call_is_priced_too(gate: SpendGate) -> None:
    request = call("pay", {"amount": "3", "currency": "USD"}, method="protocols/MCP/tools/call")
    assert priced(gate, request)[:2] == ("payments", Decimal(3))


@pytest.mark.parametrize(
    ("args", "agent", "reason", "fragment"),
    [
        ({"amount": -5, "currency": "USD"}, "shopper", "invalid_amount", "amount must be > 0"),
        ({"amount": 0, "currency": "USD"}, "shopper", "invalid_amount", "amount must be > 0"),
        ({"amount": "0.00", "currency": "USD"}, "shopper", "invalid_amount", "must be > 0"),
        ({"amount": True, "currency": "USD"}, "shopper", "invalid_amount", "not True"),
        ({"amount": "ten", "currency": "USD"}, "shopper", "invalid_amount", "not a decimal"),
        ({"amount": None, "currency": "USD"}, "shopper", "invalid_amount", "decimal string"),
        ({"amount": [5], "currency": "USD"}, "shopper", "invalid_amount", "decimal string"),
        ({"amount": 1.0000001, "currency": "USD"}, "shopper", "invalid_amount", "6 fractional"),
        ({"amount": 10**16, "currency": "USD"}, "shopper", "invalid_amount", "too large"),
        ({"amount": 5, "currency": "usd"}, "shopper", "invalid_currency", "three uppercase"),
        ({"amount": 5, "currency": 840}, "shopper", "invalid_currency", "three uppercase"),
        ({"amount": 5, "currency": "USD"}, "misconfigured", "invalid_budget", "'Not A Budget'"),
    ],
)
def test_unusable_values_are_refused_with_their_reason(
    gate: SpendGate, args: dict[str, Any], agent: str, reason: str, fragment: str
) -> None:
    result = gate.price(call("pay", args, agent=agent))
    assert isinstance(result, Unpriced), result
    assert (result.charge.id, result.reason, result.failure) == ("payments", reason, None)
    assert fragment in result.reasoning


@pytest.mark.parametrize(
    ("args", "agent", "where"),
    [
        ({"currency": "USD"}, "shopper", "charge payments: amount: evaluation failed"),
        ({"amount": 5}, "shopper", "charge payments: currency: evaluation failed"),
        ({"amount": 5, "currency": "USD"}, "stranger", "charge payments: budget: evaluation"),
    ],
)
def test_expression_errors_fail_closed_with_detail_for_the_operator(
    gate: SpendGate, args: dict[str, Any], agent: str, where: str
) -> None:
    result = gate.price(call("pay", args, agent=agent))
    assert isinstance(result, Unpriced), result
    assert result.reason == "evaluation_failed"
    assert result.reasoning.endswith("so it is denied (fail closed).")
    assert result.failure is not None and result.failure.startswith(where)
    assert "KeyError" not in result.reasoning


def test_first_matching_charge_in_bundle_order_wins() -> None:
    bundle = parse_bundle(
        """
warden_bundle: 1
id: order
version: "1"
rules: [{id: all, tools: ["*"], effect: allow}]
spend:
  - {id: big, tools: [pay], when: "args.n > 10", price: "100", currency: USD, budget: a}
  - {id: any-pay, tools: ["pa*"], price: "1", currency: USD, budget: b}
  - {id: never, tools: [pay], price: "7", currency: USD, budget: c}
"""
    )
    gate = SpendGate(engine=None, bundle=bundle, find_entry=lambda s, r: None)  # type: ignore[arg-type]
    assert priced(gate, call("pay", {"n": 11})) == ("big", Decimal(100), "USD", "a")
    assert priced(gate, call("pay", {"n": 1})) == ("any-pay", Decimal(1), "USD", "b")
    assert priced(gate, call("pack", {"n": 11})) == ("any-pay", Decimal(1), "USD", "b")


def test_expressions_that_read_no_variable_are_evaluated_too() -> None:
    bundle = parse_bundle(
        """
warden_bundle: 1
id: constants
version: "1"
rules: [{id: all, tools: ["*"], effect: allow}]
spend:
  - {id: skipped, tools: [pay], when: "false", price: "9", currency: USD, budget: a}
  - {id: used, tools: [pay], when: "1 < 2", amount: "'3.5'", currency_expr: "'EUR'", budget: b}
"""
    )
    gate = SpendGate(engine=None, bundle=bundle, find_entry=lambda s, r: None)  # type: ignore[arg-type]
    assert priced(gate, call("pay", {})) == ("used", Decimal("3.5"), "EUR", "b")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(98.7, "98.7"), (4.0, "4.0"), (10, "10"), ("12.50", "12.50"), (0.1 + 0.2, None)],
)
def test_to_amount_reads_a_double_as_the_decimal_it_spells(
    value: Any, expected: str | None
) -> None:
    if expected is None:  # 0.30000000000000004: more than 6 fractional digits
        with pytest.raises(MoneyError):
            to_amount(value)
    else:
        assert str(to_amount(value)) == expected


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.5, False])
def test_to_amount_refuses_non_amounts(value: Any) -> None:
    with pytest.raises(MoneyError):
        to_amount(value)


_ADCP_BUNDLE = """
warden_bundle: 1
id: adcp-budgets
version: "1"
data:
  plans: {bot-1: "adcp:0f3a", bot-2: shop.ops}
rules: [{id: all, tools: ["*"], effect: allow}]
spend:
  - {id: pay, tools: [pay], price: "1", currency: USD, BUDGET}
"""


@pytest.mark.parametrize(
    ("budget", "named"),
    [
        ('budget: "adcp:0f3a"', "`budget` names budget 'adcp:0f3a'"),
        ("budget_expr: \"'adcp:0f3a'\"", "`budget_expr` names budget 'adcp:0f3a'"),
        ("budget_expr: \"session.agent_id == 'x' ? \\\"adcp:9\\\" : 'b'\"", "budget 'adcp:9'"),
        (
            'budget_expr: "data.plans[session.agent_id]"',
            "charge pay: `budget_expr` reads data.plans, which names budget 'adcp:0f3a'",
        ),
    ],
)
def test_a_bundle_charging_an_adcp_budget_is_refused_at_load(budget: str, named: str) -> None:
    """Decision 974: `adcp:` budgets are AdCP's alone; a charge that names one (fixed,
    a literal in budget_expr, or a data map budget_expr reads) is a load error."""
    from warden.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_bundle(_ADCP_BUNDLE.replace("BUDGET", budget))
    assert named in str(err.value)
    assert "namespace are AdCP's alone (check_governance spends them)" in str(err.value)


def test_an_adcp_budget_computed_from_the_request_is_refused_when_priced() -> None:
    """Decision 974: an id the load-time check cannot see (built from the request) is
    refused when the call is priced: the call is denied, nothing is held."""
    bundle = parse_bundle(
        _ADCP_BUNDLE.replace("BUDGET", "budget_expr: \"'ad' + 'cp:' + session.agent_id\"")
    )
    gate = SpendGate(engine=None, bundle=bundle, find_entry=lambda s, r: None)  # type: ignore[arg-type]
    result = gate.price(call("pay", {}, agent="plan9"))
    assert isinstance(result, Unpriced), result
    assert (result.charge.id, result.reason) == ("pay", "invalid_budget")
    assert result.reasoning == (
        "This call is charged to no valid budget: charge pay names budget 'adcp:plan9', an "
        "AdCP plan's budget: budgets in the adcp: namespace are AdCP's alone "
        "(check_governance spends them), so no policy charge may spend one."
    )
    ok = parse_bundle(_ADCP_BUNDLE.replace("BUDGET", "budget_expr: \"'shop.' + 'ops'\""))
    gate = SpendGate(engine=None, bundle=ok, find_entry=lambda s, r: None)  # type: ignore[arg-type]
    assert priced(gate, call("pay", {})) == ("pay", Decimal(1), "USD", "shop.ops")
