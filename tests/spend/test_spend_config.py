"""Budgets files (`warden serve --budgets`): parsed whole, every problem reported, checked
against the stored budgets before anything is applied, identical budgets left alone."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from conftest import ROOT
from spend_fixtures import open_engine

from warden.errors import ConfigError
from warden.spend import Budget, BudgetKind, Period
from warden.spend.config import apply_budgets, load_budgets, parse_budgets

DEFAULT = ROOT / "examples" / "budgets" / "default.yaml"


def entries(store: object) -> int:
    return sum(1 for r in store.iter_records() if r["kind"] == "entry")  # type: ignore[attr-defined]


def test_the_shipped_example_loads_parents_first() -> None:
    budgets = load_budgets(DEFAULT)
    kinds = [b.kind for b in budgets]
    assert kinds == sorted(kinds, key=[BudgetKind.ORG, BudgetKind.TEAM, BudgetKind.AGENT].index)
    by_id = {b.id: b for b in budgets}
    assert by_id["acme.ops.deploy-bot"] == Budget(
        "acme.ops.deploy-bot",
        BudgetKind.AGENT,
        "USD",
        Decimal("25.00"),
        Period.DAY,
        parent_id="acme.ops",
        name="Deploy bot (domains, small compute)",
    )
    assert by_id["acme.research.buyer"].cap == Decimal("100")


def test_children_may_come_before_parents() -> None:
    text = """
- {id: a.t.x, kind: agent, parent: a.t, currency: USD, cap: "1", period: day}
- {id: a.t, kind: team, parent: a, currency: USD, cap: "2", period: day}
- {id: a, kind: org, currency: USD, cap: 3, period: none}
"""
    assert [b.id for b in parse_budgets(text)] == ["a", "a.t", "a.t.x"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "non-empty YAML list"),
        ("[]", "non-empty YAML list"),
        ("- 5", "budget #1"),
        ("- {id: a, kind: org, currency: USD, cap: 1.5, period: day}", "YAML float"),
        ("- {id: a, kind: org, currency: USD, cap: '1', period: day, parent: null, x: 1}", "x:"),
        ("- {id: a, kind: org, currency: USD, period: day}", "cap: Field required"),
        ("- {id: a, kind: boss, currency: USD, cap: '1', period: day}", "kind"),
        ("- {id: a, kind: org, currency: US, cap: '1', period: day}", "three uppercase"),
        ("- {id: a, kind: org, currency: USD, cap: 'x', period: day}", "not a decimal"),
        (
            "- {id: a, kind: org, parent: b, currency: USD, cap: '1', period: day}",
            "cannot have a parent",
        ),
        (
            "- {id: a, kind: org, currency: USD, cap: '1', period: day}\n"
            "- {id: a.x, kind: agent, parent: a, currency: USD, cap: '1', period: day}",
            "budget a.x: agent budget a.x needs a parent of kind team, not org budget a",
        ),
        ("{a: 1", "not valid YAML"),
    ],
)
def test_bad_files_are_refused_with_a_reason(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_budgets(text, source="b.yaml")
    assert needle in info.value.message
    assert "b.yaml" in info.value.message


def test_apply_defines_then_leaves_identical_budgets_alone(tmp_path: Path) -> None:
    eng, store, _ = open_engine(tmp_path / "w.db")
    budgets = load_budgets(DEFAULT)
    assert apply_budgets(eng, budgets) == [b.id for b in budgets]
    n = entries(store)
    assert apply_budgets(eng, budgets) == []  # a restart writes nothing
    assert entries(store) == n
    changed = [
        b if b.id != "acme.ops" else Budget(**{**b.__dict__, "cap": Decimal("300")})
        for b in budgets
    ]
    assert apply_budgets(eng, changed) == ["acme.ops"]
    assert eng.path("acme.ops")[0].cap == Decimal("300")
    store.close()


def test_a_parent_may_already_be_stored(tmp_path: Path) -> None:
    eng, store, _ = open_engine(tmp_path / "w.db")
    eng.define_budget(Budget("acme", BudgetKind.ORG, "USD", Decimal("10"), Period.NONE))
    team = parse_budgets(
        "- {id: acme.t, kind: team, parent: acme, currency: USD, cap: '5', period: day}"
    )
    assert apply_budgets(eng, team) == ["acme.t"]
    eur = parse_budgets(
        "- {id: acme.e, kind: team, parent: acme, currency: EUR, cap: '5', period: day}"
    )
    with pytest.raises(ConfigError) as info:
        apply_budgets(eng, eur)
    assert "currencies never mix" in info.value.message
    store.close()


def test_conflicts_are_all_reported_and_nothing_is_applied(tmp_path: Path) -> None:
    eng, store, _ = open_engine(tmp_path / "w.db")
    apply_budgets(eng, load_budgets(DEFAULT))
    n = entries(store)
    text = """
- {id: acme, kind: org, currency: USD, cap: "1", period: month}
- {id: acme.ops, kind: org, currency: USD, cap: "1", period: month}
- {id: acme.research, kind: team, parent: acme, currency: USD, cap: "1", period: day}
- {id: acme.research.buyer, kind: team, parent: acme, currency: USD, cap: "1", period: day}
"""
    with pytest.raises(ConfigError) as info:
        apply_budgets(eng, parse_budgets(text))
    msg = info.value.message
    assert "acme.ops is stored as a team" in msg
    assert "acme.research.buyer is stored as a agent" in msg
    assert eng.path("acme")[0].cap == Decimal("1000.00")  # the valid lines were not applied
    assert eng.path("acme.research")[0].period is Period.MONTH
    assert entries(store) == n
    store.close()
