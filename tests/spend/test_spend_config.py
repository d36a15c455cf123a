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
        principals=("deploy-bot",),
    )
    assert by_id["acme.research.buyer"].cap == Decimal("100")
    # every shipped budget is bound explicitly (an unbound one is spendable by nobody)
    assert by_id["acme.research.buyer"].principals == ("buyer", "group:research")
    assert all(b.principals for b in budgets)


def test_principals_bind_a_budget_sorted_and_deduplicated() -> None:
    text = """
- {id: a, kind: org, currency: USD, cap: 3, period: none, principals: [zed, "group:ops", zed]}
- {id: b, kind: org, currency: USD, cap: 3, period: none}
"""
    by_id = {b.id: b for b in parse_budgets(text)}
    assert by_id["a"].principals == ("group:ops", "zed")
    assert by_id["b"].principals == ()  # no binding: spendable by nobody
    assert by_id["a"].spendable_by("zed", ())
    assert by_id["a"].spendable_by("someone", ("ops",))
    assert not by_id["a"].spendable_by("someone", ("other",))
    assert not by_id["a"].spendable_by("group:ops", ())  # a group entry is not a principal
    assert not by_id["b"].spendable_by("admin", ())


@pytest.mark.parametrize(
    ("principals", "needle"),
    [
        ("zed", "principals"),  # one string, not a list
        ('["has space"]', "'has space'"),
        ('["group:"]', "a group is group:<name>"),
        ("[1]", "must be a string"),
        ("[{a: b}]", "must be a string"),
    ],
)
def test_bad_principals_are_refused(principals: str, needle: str) -> None:
    text = f"- {{id: a, kind: org, currency: USD, cap: 3, period: none, principals: {principals}}}"
    with pytest.raises(ConfigError) as info:
        parse_budgets(text)
    assert needle in info.value.message, info.value.message
    assert "budget #1 (a)" in info.value.message


def test_applying_a_changed_binding_updates_it(tmp_path: Path) -> None:
    engine, store, _ = open_engine(tmp_path / "w.db")
    line = "- {id: a, kind: org, currency: USD, cap: 3, period: none, principals: [%s]}"
    assert apply_budgets(engine, parse_budgets(line % "x")) == ["a"]
    assert apply_budgets(engine, parse_budgets(line % "y")) == ["a"]
    assert [b.principals for b in store.budgets()] == [("y",)]
    assert apply_budgets(engine, parse_budgets(line % "y")) == []  # identical: untouched


# -- one bad budget among valid ones (fresh-user review of issue 14) ---------------------------

#: A valid four-budget file: each budget's fields as YAML ``key: value`` source text.
FOUR: list[dict[str, str]] = [
    {"id": "org", "kind": "org", "cap": '"100"', "principals": "[cfo]"},
    {"id": "org.a", "kind": "team", "parent": "org", "cap": '"50"'},
    {"id": "org.b", "kind": "team", "parent": "org", "cap": '"40"'},
    {"id": "org.c", "kind": "team", "parent": "org", "cap": '"30"'},
]

#: Each bad value a fresh user typed, with the words the refusal must contain.
BAD_VALUES = [
    ("cap", '"abc"', "cap"),
    ("cap", "10.5", "YAML float"),
    ("currency", "usd$", "usd$"),
    ("principals", "yes", "principals"),
    ("principals", '"bob"', "principals"),
    ("principals", "[null]", "must be a string"),
    ("principals", '["group:"]', "a group is group:<name>"),
]


def four_budgets(**overrides: tuple[int, str]) -> str:
    """FOUR as a YAML file, each ``key=(position, value)`` overriding one field."""
    budgets = [{"currency": "USD", "period": "none", **b} for b in FOUR]
    for key, (position, value) in overrides.items():
        budgets[position][key] = value
    return "".join("- " + "\n  ".join(f"{k}: {v}" for k, v in b.items()) + "\n" for b in budgets)


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize(("key", "value", "needle"), BAD_VALUES)
def test_a_bad_budget_before_a_valid_one_is_refused(
    position: int, key: str, value: str, needle: str
) -> None:
    text = four_budgets(**{key: (position, value)})
    with pytest.raises(ConfigError) as info:
        parse_budgets(text)
    message = info.value.message
    assert f"budget #{position + 1} " in message, message
    assert needle in message, message


@pytest.mark.parametrize("position", [0, 1, 2])
def test_every_problem_survives_later_valid_budgets(position: int) -> None:
    # two bad budgets, both before valid ones: both are reported
    text = four_budgets(cap=(position, '"abc"'), period=(3, "week"))
    with pytest.raises(ConfigError) as info:
        parse_budgets(text)
    assert f"budget #{position + 1} " in info.value.message
    assert "budget #4 " in info.value.message


def test_a_duplicate_id_before_a_valid_budget_is_refused() -> None:
    text = four_budgets(id=(2, "org.a"))
    with pytest.raises(ConfigError) as info:
        parse_budgets(text)
    assert "budget #3 (org.a)" in info.value.message
    assert "budget id org.a is defined twice" in info.value.message


def test_a_budgets_file_may_not_define_an_adcp_budget_or_one_under_it(tmp_path: Path) -> None:
    """Second review (decision 940): ``adcp:`` ids are AdCP's (decision 923), and a
    budget under one would spend a plan's money on the spend wire; each is named."""
    text = """
- {id: "adcp:zzz", kind: org, currency: USD, cap: 100, period: none}
- {id: "adcp:zzz.team", kind: team, parent: "adcp:zzz", currency: USD, cap: 60, period: none}
- {id: plain.kid, kind: agent, parent: "adcp:zzz.team", currency: USD, cap: 20, period: none}
- {id: fine, kind: org, currency: USD, cap: 5, period: none}
"""
    with pytest.raises(ConfigError) as err:
        parse_budgets(text)
    message = str(err.value)
    for named in ("id adcp:zzz is", "id adcp:zzz.team is", "parent adcp:zzz.team is"):
        assert named in message, message
    assert "(fine)" not in message and "AdCP" in message
    # A stored budget under a plan's (AdCP's own, or from before this check) cannot be
    # reached by a file either: its child is refused when the file is applied.
    engine, _, _ = open_engine(tmp_path / "w.db")
    engine.define_budget(Budget("adcp:yyy", BudgetKind.ORG, "USD", Decimal(9), Period.NONE))
    engine.define_budget(
        Budget("old.team", BudgetKind.TEAM, "USD", Decimal(9), Period.NONE, "adcp:yyy")
    )
    child = "- {id: kid, kind: agent, parent: old.team, currency: USD, cap: 1, period: none}"
    with pytest.raises(ConfigError, match="kid: parent old.team is under adcp:yyy"):
        apply_budgets(engine, parse_budgets(child))
    assert [b.id for b in engine.store.budgets()] == ["adcp:yyy", "old.team"]
