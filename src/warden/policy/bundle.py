"""Policy bundle files: YAML → validated, compiled, indexed :class:`Bundle`.

The format is documented in docs/policy-bundles.md. Loading is all or nothing:
every problem in the file is collected and reported at once in a
:class:`~warden.errors.ConfigError` naming the file, the rule id and the reason.
The bundle's content digest is ``sha256:`` + hex SHA-256 of the JCS form of the
parsed document, so formatting and comments do not change it.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from warden import strict_yaml
from warden.core.hooks import (
    MCP_METHOD_PREFIX,
    STEP_METHODS,
    WARDEN_METHODS,
    is_evaluated_method,
)
from warden.core.modifications import ModificationConflict, check_modifications
from warden.core.tool_names import fold, fold_patterns, matches_any
from warden.core.types import BundleRef, Effect
from warden.crypto.canonical import canonical_bytes, sha256_hex
from warden.errors import ConfigError, WardenError
from warden.policy.conditions import (
    IDENTITY_VARIABLES,
    RESULT_VARIABLES,
    Condition,
    ConditionError,
    Expression,
    pattern_problem,
)
from warden.provenance.config import ProvenanceSpec
from warden.spend.budgets import ADCP_BUDGET_PREFIX, adcp_budget_problem, budget_id_problem
from warden.spend.money import MoneyError, parse_amount, parse_currency

#: Hold time of a reservation when a charge does not say (s), and the longest allowed.
DEFAULT_HOLD_SECONDS = 900
MAX_HOLD_SECONDS = 7 * 24 * 3600

FORMAT_VERSION = 1
TOOL_METHODS = ("steps/toolCallRequest", "protocols/MCP/tools/call")
_RULE_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")
_GLOB_CHARS = frozenset("*?[")
#: What may follow ``protocols/MCP/`` in a hook glob: method-name characters and glob syntax.
_MCP_GLOB = re.compile(r"^[A-Za-z0-9_/*?\[\]!-]+$")
#: MCP methods (2025-06-18) a hook glob such as ``protocols/*`` is tried against.
MCP_EXAMPLES = tuple(
    MCP_METHOD_PREFIX + m
    for m in (
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "logging/setLevel",
        "completion/complete",
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/roots/list_changed",
    )
)
VALID_HOOKS_HELP = (
    "valid hooks: "
    + ", ".join(STEP_METHODS)
    + f", {MCP_METHOD_PREFIX}<method> (e.g. {MCP_METHOD_PREFIX}tools/call), or globs of these"
)


def hook_problem(hook: str) -> str | None:
    """Why a rule's ``hooks`` entry can never match a method Warden evaluates, or None.

    A literal must be one of the 19 step hooks or ``protocols/MCP/<method>``; a glob must
    match at least one of those, or be a ``protocols/MCP/…`` glob.
    """
    if not _GLOB_CHARS.intersection(hook):
        if is_evaluated_method(hook):
            return None
        candidates = (*STEP_METHODS, *WARDEN_METHODS, *MCP_EXAMPLES)
        close = [m for m in candidates if m.lower() == hook.lower()]
        close = close or difflib.get_close_matches(hook, candidates, n=1, cutoff=0.75)
        return f"unknown hook {hook!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if any(fnmatch.fnmatchcase(m, hook) for m in (*STEP_METHODS, *WARDEN_METHODS, *MCP_EXAMPLES)):
        return None
    if hook.startswith(MCP_METHOD_PREFIX) and _MCP_GLOB.match(hook[len(MCP_METHOD_PREFIX) :]):
        return None
    return f"hook glob {hook!r} matches no known method"


#: Fields of ask/defer specs that configure the approval desk, not the wire.
WARDEN_ONLY = {"approvals_required", "approver_group"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Approver(_Strict):
    type: Literal["human", "agent", "service"]
    id: str = Field(min_length=1, max_length=64)
    endpoint: str | None = None


class AskSpec(_Strict):
    question: str
    approver: Approver
    timeout_seconds: int = Field(ge=1)
    timeout_disposition: Literal["allow", "deny"] = "deny"
    context: str | None = None
    options: list[str] | None = None
    #: N of N-of-M: how many distinct approvers of ``approver.id`` (the group) must
    #: approve. Warden's own field: not sent in ``ask_details``.
    approvals_required: StrictInt = Field(1, ge=1, le=16)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude=WARDEN_ONLY)


class DeferSpec(_Strict):
    reason: Literal[
        "insufficient_context", "conflicting_policies", "low_confidence", "pending_dependency"
    ]
    resolution_method: Literal["additional_context", "human_approval", "timeout"]
    resolution_timeout_ms: int = Field(ge=1)
    timeout_decision: Literal["deny", "ask"] = "deny"
    required_context: list[str] | None = None
    #: For ``resolution_method: human_approval``: the approver group and N of N-of-M.
    #: Warden's own fields: not sent in ``defer_details``.
    approver_group: str | None = Field(None, min_length=1, max_length=64)
    approvals_required: StrictInt = Field(1, ge=1, le=16)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude=WARDEN_ONLY)


class Redaction(_Strict):
    path: str
    replacement: str | None = None


class ModifySpec(_Strict):
    modified_content: str | None = None
    redactions: list[Redaction] | None = None
    parameter_overrides: dict[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class RuleSpec(_Strict):
    id: str
    description: str | None = None
    hooks: list[str] | None = None
    tools: list[str] | None = None
    #: Match ``tools`` with exact case (default: caseless, see warden.core.tool_names).
    case_sensitive: StrictBool = False
    when: str | None = None
    effect: Effect
    warn: bool = False
    reasoning: str | None = None
    reason_codes: list[str] = Field(default_factory=list)
    ask: AskSpec | None = None
    defer: DeferSpec | None = None
    modify: ModifySpec | None = None

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not _RULE_ID.match(v):
            raise ValueError("rule id must match [A-Za-z0-9_.:-]+")
        return v

    @field_validator("hooks")
    @classmethod
    def _known_hooks(cls, v: list[str] | None) -> list[str] | None:
        bad = [why for hook in v or () if (why := hook_problem(hook)) is not None]
        if bad:
            raise ValueError("; ".join(bad) + "; " + VALID_HOOKS_HELP)
        return v

    @model_validator(mode="after")
    def _details_match_effect(self) -> RuleSpec:
        need = {Effect.ASK: "ask", Effect.DEFER: "defer", Effect.MODIFY: "modify"}
        for effect, name in need.items():
            present = getattr(self, name) is not None
            if self.effect is effect and not present:
                raise ValueError(f"effect {effect.value} requires `{name}` details")
            if self.effect is not effect and present:
                raise ValueError(f"`{name}` details given but effect is {self.effect.value}")
        if self.effect is not Effect.ALLOW and not (self.reasoning and self.reasoning.strip()):
            raise ValueError(
                f"effect {self.effect.value} requires `reasoning` (text, not only whitespace)"
            )
        if self.warn and self.effect is not Effect.ALLOW:
            raise ValueError("`warn` applies to effect allow only")
        if self.hooks is None and self.tools is None:
            raise ValueError("a rule needs `hooks`, `tools` or both")
        if self.hooks is not None and not self.hooks:
            raise ValueError("`hooks` must not be empty")
        if self.tools is not None and not self.tools:
            raise ValueError("`tools` must not be empty")
        if self.case_sensitive and self.tools is None:
            raise ValueError("`case_sensitive` applies to `tools`; this rule has none")
        return self


def _price(value: Any, what: str) -> Decimal:
    """A positive decimal price from YAML: a string (``"0.05"``) or an integer; a YAML
    float is refused because it cannot say which decimal it meant."""
    if isinstance(value, float):
        raise ValueError(
            f'{what} must be a decimal string such as "{value!r}" or an integer, not a YAML '
            "float (a binary float cannot say which decimal it meant)"
        )
    try:
        return parse_amount(value, field=what, allow_zero=False)
    except MoneyError as exc:
        raise ValueError(exc.message) from exc


class ChargeSpec(_Strict):
    """One entry of the bundle's ``spend`` section: which tool calls cost money, how much,
    in which currency, charged to which budget (docs/policy-bundles.md, "Spend")."""

    id: str
    description: str | None = None
    tools: list[str] | None = None
    when: str | None = None
    amount: str | None = None
    price: Any = None
    prices: dict[str, Any] | None = None
    currency: str | None = None
    currency_expr: str | None = None
    budget: str | None = None
    budget_expr: str | None = None
    hold_seconds: int = Field(DEFAULT_HOLD_SECONDS, ge=1, le=MAX_HOLD_SECONDS, strict=True)
    actual: str | None = None

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not _RULE_ID.match(v):
            raise ValueError("charge id must match [A-Za-z0-9_.:-]+")
        return v

    @field_validator("price")
    @classmethod
    def _price_shape(cls, v: Any) -> Any:
        if v is not None:
            _price(v, "price")
        return v

    @field_validator("prices")
    @classmethod
    def _prices_shape(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("`prices` must not be empty")
        folded: dict[str, str] = {}
        for tool, price in v.items():
            if not tool or _GLOB_CHARS.intersection(tool):
                raise ValueError(f"prices: {tool!r} must be an exact tool name (no globs)")
            if (other := folded.setdefault(fold(tool), tool)) != tool:
                # Tool names match caselessly, so these would price the same calls.
                raise ValueError(f"prices: {tool!r} and {other!r} name the same tool")
            _price(price, f"prices.{tool}")
        return v

    @field_validator("currency")
    @classmethod
    def _currency_shape(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                parse_currency(v)
            except MoneyError as exc:
                raise ValueError(exc.message) from exc
        return v

    @field_validator("budget")
    @classmethod
    def _budget_shape(cls, v: str | None) -> str | None:
        if v is not None and (why := budget_id_problem(v)) is not None:
            raise ValueError(why)
        if v is not None and (why := adcp_budget_problem(v, "`budget`")) is not None:
            raise ValueError(why)
        return v

    @field_validator("budget_expr")
    @classmethod
    def _budget_expr_not_adcp(cls, v: str | None) -> str | None:
        # A literal AdCP budget in the expression (decision 974); one computed from the
        # request is refused when the call is priced (gates/spend.py).
        if v is not None and (m := _ADCP_LITERAL.search(v)) is not None:
            raise ValueError(adcp_budget_problem(m.group(1), "`budget_expr`"))
        return v

    @model_validator(mode="after")
    def _one_of_each(self) -> ChargeSpec:
        given = [n for n in ("amount", "price", "prices") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "a charge needs exactly one of `amount` (CEL), `price` or `prices`"
                + (f"; got {', '.join(given)}" if given else "")
            )
        for fixed, expr in (("currency", "currency_expr"), ("budget", "budget_expr")):
            if (getattr(self, fixed) is None) == (getattr(self, expr) is None):
                raise ValueError(f"a charge needs exactly one of `{fixed}` and `{expr}`")
        if self.prices is not None and self.tools is not None:
            raise ValueError("`tools` is implied by `prices` (its keys); give one, not both")
        if self.prices is None and self.tools is None:
            raise ValueError("a charge needs `tools` (or a `prices` table)")
        if self.tools is not None and not self.tools:
            raise ValueError("`tools` must not be empty")
        return self


class BundleSpec(_Strict):
    warden_bundle: Literal[1]
    id: str
    version: str
    name: str | None = None
    description: str | None = None
    default: Literal["allow", "deny"] = "deny"
    default_reasoning: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    rules: list[RuleSpec]
    spend: list[ChargeSpec] = Field(default_factory=list)
    #: Provenance-aware decisions (docs/provenance.md); None = off.
    provenance: ProvenanceSpec | None = None

    @field_validator("provenance", mode="before")
    @classmethod
    def _provenance_not_null(cls, v: Any) -> Any:
        # `provenance:` with nothing under it is almost surely a mistake, not "off".
        if v is None:
            raise ValueError("is empty (null); remove the key to turn provenance off")
        return v

    @field_validator("default_reasoning")
    @classmethod
    def _reasoning_not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty or only whitespace")
        return v

    @model_validator(mode="after")
    def _non_empty_unique(self) -> BundleSpec:
        if not self.rules:
            raise ValueError("a bundle needs at least one rule (an empty bundle is refused)")
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"duplicate rule id {rule.id!r}")
            seen.add(rule.id)
        charges: set[str] = set()
        for charge in self.spend:
            if charge.id in charges:
                raise ValueError(f"duplicate charge id {charge.id!r}")
            charges.add(charge.id)
            for name in _DATA_READ.findall(charge.budget_expr or ""):
                for value in _strings(self.data.get(name)):
                    what = f"charge {charge.id}: `budget_expr` reads data.{name}, which"
                    if (why := adcp_budget_problem(value, what)) is not None:
                        raise ValueError(why)  # decision 974
        return self


#: A CEL string literal (any quoting) that starts with an AdCP budget id.
_ADCP_LITERAL = re.compile("[\"'](" + re.escape(ADCP_BUDGET_PREFIX) + "[^\"'\\s]*)")
#: The bundle data maps an expression reads (``data.NAME``).
_DATA_READ = re.compile(r"\bdata\.([A-Za-z_][A-Za-z0-9_]*)")


def _strings(value: Any) -> list[str]:
    """Every string in a data value (its map values and list items, nested; not the
    map keys, which are what an expression looks up by)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


@dataclass(frozen=True, eq=False)
class Rule:
    """A compiled rule: its spec, its condition and its method/tool matchers.

    ``tools`` are the rule's globs as written; ``tool_patterns`` what names are
    matched against (folded unless ``spec.case_sensitive``; warden.core.tool_names).
    """

    spec: RuleSpec
    order: int
    condition: Condition | None
    hooks: tuple[str, ...]
    tools: tuple[str, ...] | None
    tool_patterns: tuple[str, ...] = ()

    @classmethod
    def compile(
        cls,
        spec: RuleSpec,
        order: int,
        condition: Condition | None,
        hooks: tuple[str, ...],
        tools: tuple[str, ...] | None,
    ) -> Rule:
        """A rule whose tool globs are folded once, here, unless it asks for exact case."""
        patterns = tools or ()
        return cls(
            spec,
            order,
            condition,
            hooks,
            tools,
            patterns if spec.case_sensitive else fold_patterns(patterns),
        )

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def effect(self) -> Effect:
        return self.spec.effect

    def matches_method(self, method: str) -> bool:
        return any(fnmatch.fnmatchcase(method, h) for h in self.hooks)

    def matches_tool(self, tool_name: str) -> bool:
        """Whether the rule applies to ``tool_name`` (any name when it has no ``tools``;
        caselessly unless ``case_sensitive``)."""
        if self.tools is None:
            return True
        return matches_any(tool_name, self.tool_patterns, case_sensitive=self.spec.case_sensitive)


@dataclass(frozen=True, eq=False)
class Charge:
    """A compiled ``spend`` entry: the tool calls it prices and how (see :class:`ChargeSpec`).

    Exactly one of ``amount`` (CEL over the request), ``price`` or ``prices`` (per tool) is
    set; likewise ``currency``/``currency_expr`` and ``budget``/``budget_expr``. ``actual``,
    if set, is CEL over the ``steps/toolCallResult`` that settles the reservation. Tool
    names match caselessly (folded ``tools`` and ``prices`` keys; warden.core.tool_names).
    """

    spec: ChargeSpec
    order: int
    tools: tuple[str, ...]
    condition: Condition | None
    amount: Expression | None
    price: Decimal | None
    prices: Mapping[str, Decimal]
    currency_expr: Expression | None
    budget_expr: Expression | None
    actual: Expression | None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def currency(self) -> str | None:
        return self.spec.currency

    @property
    def budget(self) -> str | None:
        return self.spec.budget

    @property
    def hold_seconds(self) -> int:
        return self.spec.hold_seconds

    @functools.cached_property
    def _patterns(self) -> tuple[str, ...]:
        return fold_patterns(self.tools)

    @functools.cached_property
    def _folded_prices(self) -> dict[str, Decimal]:
        return {fold(t): p for t, p in self.prices.items()}

    def matches_tool(self, tool_name: str) -> bool:
        return matches_any(tool_name, self._patterns, case_sensitive=False)

    def price_for(self, tool_name: str) -> Decimal | None:
        """The ``prices`` entry of ``tool_name`` (caseless), or None."""
        return self._folded_prices.get(fold(tool_name))


_CHARGE_EXPRESSIONS = ("when", "amount", "currency_expr", "budget_expr", "actual")


def _compile_charge(raw: Mapping[str, Any]) -> tuple[dict[str, Expression | None], list[str]]:
    """Compile a charge's CEL fields (``when`` must be bool; ``actual`` reads the result)."""
    compiled: dict[str, Expression | None] = {}
    problems: list[str] = []
    for name in _CHARGE_EXPRESSIONS:
        source = raw.get(name)
        compiled[name] = None
        if not isinstance(source, str):
            continue
        try:
            if name == "when":
                compiled[name] = Condition(source)
            elif name == "actual":
                compiled[name] = Expression(source, allowed=RESULT_VARIABLES)
            elif name == "budget_expr":
                compiled[name] = Expression(source, allowed=IDENTITY_VARIABLES)
            else:
                compiled[name] = Expression(source)
        except ConditionError as exc:
            problems.append(f"{name}: {exc}")
    return compiled, problems


@dataclass(frozen=True)
class Bundle:
    """A loaded bundle: identity, default effect, constants, compiled rules and charges."""

    ref: BundleRef
    name: str | None
    default: Effect
    default_reasoning: str
    data: dict[str, Any]
    rules: tuple[Rule, ...]
    source: str
    charges: tuple[Charge, ...] = field(default=())
    provenance: ProvenanceSpec | None = None


def _problem(source: str, where: str, msg: str) -> str:
    return f"{source}: {where}: {msg}"


def _raw_rule_id(rules: Any, index: int) -> str:
    if isinstance(rules, list) and index < len(rules) and isinstance(rules[index], dict):
        return str(rules[index].get("id", f"#{index}"))
    return f"#{index}"


def _schema_problems(exc: ValidationError, doc: dict[str, Any], source: str) -> list[str]:
    """One ``file: where: reason`` line per pydantic error."""
    problems = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = "bundle"
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            where = f"rule {_raw_rule_id(doc.get('rules'), loc[1])}"
            loc = loc[2:]
        elif len(loc) >= 2 and loc[0] == "spend" and isinstance(loc[1], int):
            where = f"charge {_raw_rule_id(doc.get('spend'), loc[1])}"
            loc = loc[2:]
        field = ".".join(str(p) for p in loc)
        problems.append(_problem(source, where, f"{field + ': ' if field else ''}{err['msg']}"))
    return problems


def _data_problems(data: Any, source: str) -> list[str]:
    """Every string under a ``data`` key ending in ``_patterns`` must compile as RE2
    (such lists are patterns for ``re_find``); one problem per bad entry, naming it."""
    problems: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            where = f"{path}.{key}"
            if not (isinstance(key, str) and key.endswith("_patterns")):
                walk(value, where)
                continue
            items: list[tuple[str, Any]] = (
                [(f"{where}[{i}]", v) for i, v in enumerate(value)]
                if isinstance(value, list)
                else [(where, value)]
            )
            for at, item in items:
                if not isinstance(item, str):
                    why: str | None = "a `_patterns` entry must be a string (an RE2 pattern)"
                else:
                    why = pattern_problem(item)
                if why is not None:
                    problems.append(_problem(source, "bundle", f"{at}: {why}"))

    walk(data, "data")
    return problems


def _raw_rule_problems(exc: ValidationError, doc: dict[str, Any], source: str) -> list[str]:
    """CEL, §6.3 and duplicate-id problems of a bundle that failed schema validation."""
    rules = doc.get("rules")
    if not isinstance(rules, list):
        return []
    problems = []
    for index, raw in enumerate(rules):
        if not isinstance(raw, dict):
            continue
        where = f"rule {_raw_rule_id(rules, index)}"
        if isinstance(raw.get("when"), str):
            try:
                Condition(raw["when"])
            except ConditionError as cexc:
                problems.append(_problem(source, where, f"when: {cexc}"))
        try:
            modify = ModifySpec.model_validate(raw["modify"]) if "modify" in raw else None
        except ValidationError:
            modify = None  # already reported as a schema error
        if modify is not None:
            try:
                check_modifications(modify.to_wire())
            except ModificationConflict as mexc:
                problems.append(_problem(source, where, f"modify: {mexc}"))
    charges = doc.get("spend")
    charges = charges if isinstance(charges, list) else []
    for index, raw in enumerate(charges):
        if isinstance(raw, dict):
            where = f"charge {_raw_rule_id(charges, index)}"
            problems += [_problem(source, where, why) for why in _compile_charge(raw)[1]]
    # BundleSpec's own validator (empty/duplicate ids) runs only when every field is valid.
    if any(not err["loc"] for err in exc.errors()):
        return problems
    for kind, items in (("rule", rules), ("charge", charges)):
        ids = [raw.get("id") for raw in items if isinstance(raw, dict)]
        for rid in dict.fromkeys(i for i in ids if isinstance(i, str) and ids.count(i) > 1):
            problems.append(_problem(source, "bundle", f"duplicate {kind} id {rid!r}"))
    return problems


def parse_bundle(text: str, *, source: str = "<bundle>") -> Bundle:
    """Parse and compile a bundle from YAML text.

    Raises :class:`ConfigError` listing every problem (``file: rule <id>: reason``). The
    same text and source parsed again in this process are answered from a small cache (a
    :class:`Bundle` is immutable, its rules compiled once): a reload of an unchanged
    file, and every runtime a process starts on one bundle, skip the YAML and CEL work.
    A refused text is not cached.
    """
    return _parse_bundle(text, source)


@functools.lru_cache(maxsize=16)
def _parse_bundle(text: str, source: str) -> Bundle:
    try:
        doc = strict_yaml.load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_problem(source, "YAML", str(exc)), reason="bundle_invalid") from exc
    if not isinstance(doc, dict):
        raise ConfigError(
            _problem(source, "top level", "must be a mapping"), reason="bundle_invalid"
        )
    try:
        spec = BundleSpec.model_validate(doc)
    except ValidationError as exc:
        # Report every problem at once: schema errors, and the CEL, §6.3 and
        # duplicate-id checks that a schema error would otherwise hide.
        problems = _schema_problems(exc, doc, source) + _raw_rule_problems(exc, doc, source)
        problems += _data_problems(doc.get("data"), source)
        raise ConfigError("\n".join(problems), reason="bundle_invalid") from exc
    problems = _data_problems(spec.data, source)
    compiled: list[Rule] = []
    for order, rule in enumerate(spec.rules):
        cond: Condition | None = None
        if rule.when is not None:
            try:
                cond = Condition(rule.when)
            except ConditionError as exc:
                problems.append(_problem(source, f"rule {rule.id}", f"when: {exc}"))
        if rule.modify is not None:
            try:
                check_modifications(rule.modify.to_wire())
            except ModificationConflict as exc:
                problems.append(_problem(source, f"rule {rule.id}", f"modify: {exc}"))
        hooks = tuple(rule.hooks) if rule.hooks is not None else TOOL_METHODS
        compiled.append(
            Rule.compile(
                rule, order, cond, hooks, tuple(rule.tools) if rule.tools is not None else None
            )
        )
    charges: list[Charge] = []
    for order, charge in enumerate(spec.spend):
        exprs, why = _compile_charge(charge.model_dump())
        problems += [_problem(source, f"charge {charge.id}", w) for w in why]
        prices = charge.prices or {}
        charges.append(
            Charge(
                spec=charge,
                order=order,
                tools=tuple(charge.tools if charge.tools is not None else prices),
                condition=exprs["when"] if isinstance(exprs["when"], Condition) else None,
                amount=exprs["amount"],
                price=_price(charge.price, "price") if charge.price is not None else None,
                prices=MappingProxyType({t: _price(v, f"prices.{t}") for t, v in prices.items()}),
                currency_expr=exprs["currency_expr"],
                budget_expr=exprs["budget_expr"],
                actual=exprs["actual"],
            )
        )
    if problems:
        raise ConfigError("\n".join(problems), reason="bundle_invalid")
    try:
        digest = "sha256:" + sha256_hex(canonical_bytes(doc))
    except WardenError as exc:
        raise ConfigError(
            _problem(source, "bundle", f"not canonical JSON data: {exc}"), reason="bundle_invalid"
        ) from exc
    return Bundle(
        ref=BundleRef(spec.id, spec.version, digest),
        name=spec.name,
        default=Effect(spec.default),
        default_reasoning=spec.default_reasoning or "No policy rule matched this step.",
        data=spec.data,
        rules=tuple(compiled),
        source=source,
        charges=tuple(charges),
        provenance=spec.provenance,
    )


def load_bundle(path: Path) -> Bundle:
    """Load a bundle file; see :func:`parse_bundle`. Raises ConfigError if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read bundle: {exc}", reason="bundle_invalid") from exc
    return parse_bundle(text, source=str(path))
