"""Budgets from a configuration file: ``warden serve --budgets FILE`` (issue 3 item 1).

The file is a YAML list of budgets::

    - id: acme                 # ^[a-z0-9][a-z0-9_.:-]{0,63}$
      kind: org                # org | team | agent
      currency: USD            # ISO 4217 code; a budget tree never mixes currencies
      cap: "1000.00"           # a decimal string or an integer, never a YAML float
      period: month            # day | month | none (UTC boundaries)
      name: Acme Inc.          # optional
      principals: [cfo]        # who may spend it on the spend wire: API key principals
                               # and group:<name> entries; omitted or []: nobody
    - id: acme.ops
      kind: team
      parent: acme             # required for team and agent budgets
      ...

``principals`` binds a budget to the callers that may quote against it
(:mod:`warden.spend.binding`): not inherited by children, and a budget without it is
spendable by nobody (an admin key still reads it). The file is the whole truth for the
budgets it names: loading it sets their binding as written.

:func:`load_budgets` parses and checks the whole file (every problem reported at
once); :func:`apply_budgets` then checks it against the budgets already stored
(a parent may live in the database; kind, parent and currency of an existing
budget never change) and only then upserts each changed budget through
:meth:`SpendEngine.define_budget <warden.spend.engine.SpendEngine.define_budget>`,
so a bad file changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from warden import strict_yaml
from warden.errors import ConfigError, WardenError
from warden.spend.binding import principals_problems
from warden.spend.budgets import Budget, BudgetError, BudgetKind, Period, budget_id_problem
from warden.spend.engine import SpendEngine
from warden.spend.money import parse_amount, parse_currency
from warden.spend.ownership import ADCP_BUDGET_PREFIX

_LEVEL = {BudgetKind.ORG: 0, BudgetKind.TEAM: 1, BudgetKind.AGENT: 2}


class _BudgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: StrictStr
    kind: BudgetKind
    parent: StrictStr | None = None
    currency: StrictStr
    cap: Any  # checked by parse_amount: a decimal string or an integer
    period: Period
    name: StrictStr = ""
    principals: list[Any] = []  # each entry checked by Budget.validate


def parse_budgets(text: str, *, source: str = "<budgets>") -> list[Budget]:
    """The budgets of a budgets file, parents before children.

    Raises :class:`ConfigError` listing every problem: YAML errors, a document
    that is not a list of mappings, unknown or missing fields, bad amounts,
    currencies or ids, duplicate ids, a parent of the wrong kind or currency.
    Parents not in the file are checked by :func:`apply_budgets`.
    """
    try:
        doc = strict_yaml.load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{source}: must be a non-empty YAML list of budgets")
    problems: list[str] = []
    budgets: dict[str, Budget] = {}
    for i, raw in enumerate(doc):
        where = f"{source}: budget #{i + 1}"
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            where += f" ({raw['id']})"
        try:
            spec = _BudgetSpec.model_validate(raw)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "budget"
                problems.append(f"{where}: {loc}: {err['msg']}")
            continue
        try:
            if problem := budget_id_problem(spec.id):
                raise BudgetError(problem)
            _not_adcps(spec.id, spec.parent)
            if isinstance(spec.cap, float):
                raise BudgetError(
                    f"cap {spec.cap!r} is a YAML float; write it as a quoted decimal string "
                    '(e.g. "12.50") or an integer'
                )
            budget = Budget(
                id=spec.id,
                kind=spec.kind,
                currency=parse_currency(spec.currency),
                cap=parse_amount(spec.cap, field="cap"),
                period=spec.period,
                parent_id=spec.parent,
                name=spec.name,
                principals=tuple(spec.principals),
            )
            # Not named ``problems``: that is the file-wide list (reusing the name once
            # wiped earlier budgets' errors and let a bad file start the server).
            if bad_principals := principals_problems(spec.principals):
                raise BudgetError("; ".join(bad_principals))
            if budget.id in budgets:
                raise BudgetError(f"budget id {budget.id} is defined twice")
        except WardenError as exc:
            problems.append(f"{where}: {exc.message}")
            continue
        budgets[budget.id] = budget
    ordered = sorted(budgets.values(), key=lambda b: _LEVEL[b.kind])
    for b in ordered:
        parent = budgets.get(b.parent_id) if b.parent_id else None
        if b.kind is not BudgetKind.ORG and b.parent_id is not None and parent is None:
            continue  # may be stored already: apply_budgets checks it
        try:
            b.validate(parent)
        except BudgetError as exc:
            problems.append(f"{source}: budget {b.id}: {exc.message}")
    if problems:
        raise ConfigError("invalid budgets file\n" + "\n".join(problems))
    return ordered


def _not_adcps(budget_id: str, parent_id: str | None) -> None:
    """Refuse a budget in AdCP's ``adcp:`` namespace, or under one: ``sync_plans`` alone
    defines those (it does not load budgets files), and a budget under a plan's would
    spend the plan's money around ``check_governance`` (decisions 923, 940)."""
    for what, bid in (("id", budget_id), ("parent", parent_id)):
        if bid is not None and bid.startswith(ADCP_BUDGET_PREFIX):
            raise BudgetError(
                f"{what} {bid} is in the {ADCP_BUDGET_PREFIX} namespace of AdCP plans' "
                "budgets, which AdCP's sync_plans alone defines; a budgets file may not "
                "define one or a budget under one"
            )


def load_budgets(path: Path) -> list[Budget]:
    """:func:`parse_budgets` of a file; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"budgets file {path} cannot be read: {exc}") from exc
    return parse_budgets(text, source=str(path))


def apply_budgets(engine: SpendEngine, budgets: list[Budget]) -> list[str]:
    """Upsert ``budgets`` (parents first) unless any conflicts with what is stored.

    Returns the ids defined or changed (an identical stored budget is left alone,
    so a restart writes no audit entries). Raises :class:`ConfigError` listing
    every conflict before changing anything.
    """
    stored = {b.id: b for b in engine.store.budgets()}
    check_budgets(budgets, stored)
    changed: list[str] = []
    for b in budgets:
        if stored.get(b.id) != b:
            engine.define_budget(b)
            changed.append(b.id)
    return changed


def check_budgets(budgets: list[Budget], stored: dict[str, Budget]) -> None:
    """Raise :class:`ConfigError` listing every conflict of ``budgets`` with the ``stored``
    ones (by id): a changed kind, parent or currency, a parent found in neither, or one
    under an AdCP plan's budget. ``{}`` checks a file against a database not made yet."""
    mine = {b.id: b for b in budgets}
    problems: list[str] = []
    for b in budgets:
        old = stored.get(b.id)
        if old is not None and (old.kind, old.parent_id, old.currency) != (
            b.kind,
            b.parent_id,
            b.currency,
        ):
            problems.append(
                f"budget {b.id} is stored as a {old.kind.value} under {old.parent_id} in "
                f"{old.currency}; only cap, period, name and principals can change"
            )
            continue
        parent_id = b.parent_id
        parent = (mine.get(parent_id) or stored.get(parent_id)) if parent_id else None
        if parent is not None and parent_id not in mine:
            # A stored parent: none of its ancestors may be an AdCP plan's (decision 940).
            above = stored.get(parent.parent_id) if parent.parent_id else None
            while above is not None and not above.id.startswith(ADCP_BUDGET_PREFIX):
                above = stored.get(above.parent_id) if above.parent_id else None
            if above is not None:
                problems.append(
                    f"budget {b.id}: parent {parent_id} is under {above.id}, an AdCP plan's "
                    "budget, which AdCP's sync_plans alone manages; a budgets file may not "
                    "define a budget under one"
                )
                continue
        try:
            b.validate(parent)
        except BudgetError as exc:
            problems.append(exc.message)
    if problems:
        raise ConfigError("budgets file conflicts with the stored budgets\n" + "\n".join(problems))
