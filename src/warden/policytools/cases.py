"""Policy test files: YAML → validated :class:`TestFile` (docs/policy-testing.md).

A test file holds cases for one bundle. Each case is a request (a full ACS hook and
payload, or the shorthand ``tool:``/``args:``/``provenance:``), optional agent and
session facts, and what the verdict must be. Parsing is strict: unknown keys, repeated
keys, a case without a request or an expectation are refused, and every problem in
the file is reported at once in a :class:`~warden.errors.ConfigError` naming the file
and the case (``file: case 'name': field: reason``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from warden import strict_yaml
from warden.core.hooks import WARDEN_METHODS
from warden.core.types import Effect
from warden.errors import AcsErrorCode, ConfigError

FORMAT_VERSION = 1
#: Hooks the ``tool:`` shorthand builds a request for.
TOOL_HOOKS = ("steps/toolCallRequest", "protocols/MCP/tools/call", *WARDEN_METHODS)
#: The names ``expect.error`` may give: the JSON-RPC errors the server answers
#: (``AcsErrorCode`` names, lower case, as ``got.error.name`` reports them).
ERROR_NAMES = tuple(code.name.lower() for code in AcsErrorCode)
Origin = Literal[
    "user_input", "system", "tool_output", "retrieved", "agent_generated", "a2a_inbound", "external"
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentSpec(_Strict):
    """The verified caller (CEL ``agent``): a registered agent's id, owner, groups and
    budgets. A case without one runs as an unverified caller (``agent.verified`` false)."""

    id: str = Field(min_length=1)
    owner: str = ""
    groups: list[str] = Field(default_factory=list)
    budgets: list[str] = Field(default_factory=list)


class ArgProvenance(_Strict):
    """An argument's ACS provenance label (provenance.json); ``provenance_id`` defaults
    to ``test:<argument>``."""

    provenance_id: str | None = Field(None, min_length=1)
    origin: Origin
    source_id: str | None = None
    derived_from: list[str] | None = None


class Step(_Strict):
    """One request: ``hook`` + ``payload`` (the full ACS form), or the shorthand ``tool``
    (+ ``args``, ``provenance``) for a tool call, or ``tool`` + ``result`` for a tool
    result. ``metadata`` entries are added to the request's ACS metadata."""

    hook: str | None = None
    payload: dict[str, Any] | None = None
    tool: str | None = Field(None, min_length=1)
    args: dict[str, Any] | None = None
    provenance: dict[str, ArgProvenance] | None = None
    result: Any = None
    result_id: str | None = Field(None, min_length=1)
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Step:
        given = self.model_fields_set
        shorthand = [n for n in ("tool", "args", "provenance", "result", "result_id") if n in given]
        if self.payload is not None:
            if shorthand:
                raise ValueError(
                    f"give `hook` + `payload` or the shorthand, not both ({', '.join(shorthand)})"
                )
            if self.hook is None:
                raise ValueError("`payload` needs `hook` (the ACS method it is sent on)")
            if self.hook in WARDEN_METHODS:
                raise ValueError(f"{self.hook} takes the shorthand `tool` + `args`, not `payload`")
            return self
        if self.tool is None:
            raise ValueError("a request needs `tool` (shorthand) or `hook` and `payload`")
        if "result" in given:
            if self.hook not in (None, "steps/toolCallResult"):
                raise ValueError("`result` is the shorthand of hook steps/toolCallResult")
            for bad in ("args", "provenance"):
                if bad in given:
                    raise ValueError(f"`{bad}` belongs to a tool call, not a `result`")
            return self
        if "result_id" in given:
            raise ValueError("`result_id` needs `result`")
        hook = self.hook or "steps/toolCallRequest"
        if hook not in TOOL_HOOKS:
            raise ValueError(
                f"the `tool` shorthand builds {', '.join(TOOL_HOOKS)}; for {hook} give "
                "`hook` and `payload`"
            )
        if self.provenance is not None:
            if hook != "steps/toolCallRequest":
                raise ValueError("`provenance` applies to steps/toolCallRequest arguments only")
            missing = sorted(set(self.provenance) - set(self.args or {}))
            if missing:
                raise ValueError(f"`provenance` names arguments not in `args`: {missing}")
        return self

    @property
    def method(self) -> str:
        """The ACS (or Warden) method this step is sent on."""
        if self.hook is not None:
            return self.hook
        return "steps/toolCallResult" if "result" in self.model_fields_set else TOOL_HOOKS[0]


class HistoryStep(Step):
    """An earlier step of the session. It is decided by the bundle under test like the
    case itself, and recorded with that decision unless ``decision`` says what was
    recorded (a human's answer, say)."""

    decision: Effect | None = None


class SessionSpec(_Strict):
    """Session facts (CEL ``session``; the provenance graph the step sees)."""

    id: str | None = None
    agent_id: str | None = Field(None, min_length=1)
    step_count: int | None = Field(None, ge=0)
    history: list[HistoryStep] = Field(default_factory=list)

    @model_validator(mode="after")
    def _count_covers_history(self) -> SessionSpec:
        if self.step_count is not None and self.step_count < len(self.history):
            raise ValueError(
                f"step_count {self.step_count} is less than the {len(self.history)} history steps"
            )
        return self


class Expect(_Strict):
    """What the verdict must be. ``decision`` (or ``error``, the JSON-RPC error the
    server would answer, e.g. ``invalid_params``) is required; ``rules`` is the exact
    set of rules that fired, ``reason_codes`` the exact set of reason codes,
    ``modifications`` the exact modifications object (null: none), ``approver_group``
    the group the approval desk would ask."""

    decision: Effect | None = None
    error: str | None = None
    rules: list[str] | None = None
    reason_codes: list[str] | None = None
    modifications: dict[str, Any] | None = None
    approver_group: str | None = None
    warn: StrictBool | None = None

    @field_validator("error")
    @classmethod
    def _known_error(cls, value: str | None) -> str | None:
        # A misspelt name could never match, so the case would fail for the wrong reason.
        if value is not None and value not in ERROR_NAMES:
            raise ValueError(f"unknown error {value!r}; one of {', '.join(ERROR_NAMES)}")
        return value

    @model_validator(mode="after")
    def _decision_or_error(self) -> Expect:
        if (self.decision is None) == (self.error is None):
            raise ValueError("`expect` needs exactly one of `decision` and `error`")
        if self.error is not None and len(self.model_fields_set) > 1:
            raise ValueError("`expect.error` takes no other expectation")
        return self


class Case(Step):
    """One test case: a request, its caller and session, and what the verdict must be."""

    name: str = Field(min_length=1)
    description: str | None = None
    agent: AgentSpec | None = None
    session: SessionSpec | None = None
    expect: Expect


class Defaults(_Strict):
    """What every case of the file gets unless it says otherwise."""

    agent: AgentSpec | None = None
    metadata: dict[str, Any] | None = None


class TestFile(_Strict):
    """A parsed test file. ``bundle``, if given, is the id of the bundle the cases are
    written for: running them against another bundle is refused."""

    warden_policy_tests: Literal[1]
    bundle: str | None = None
    description: str | None = None
    defaults: Defaults = Field(default_factory=Defaults)
    cases: list[Case] = Field(min_length=1)
    source: str = ""

    @model_validator(mode="after")
    def _unique_names(self) -> TestFile:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(f"duplicate case name {case.name!r}")
            seen.add(case.name)
        return self


_DUPLICATE = "duplicate case name "


def _duplicate_names(doc: dict[str, Any], source: str) -> list[str]:
    """Repeated case names, read from the raw document so they are reported beside the
    other problems (the model's own check runs only once every case has validated)."""
    cases = doc.get("cases")
    first: dict[str, int] = {}
    out: list[str] = []
    for i, raw in enumerate(cases if isinstance(cases, list) else []):
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str) or not name:
            continue
        if name in first:
            out.append(
                f"{source}: file: {_DUPLICATE}{name!r} (cases #{first[name] + 1} and #{i + 1})"
            )
        else:
            first[name] = i
    return out


def _where(doc: dict[str, Any], loc: list[Any]) -> tuple[str, list[Any]]:
    cases = doc.get("cases")
    if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
        raw = cases[loc[1]] if isinstance(cases, list) and loc[1] < len(cases) else None
        name = raw.get("name") if isinstance(raw, dict) else None
        return (f"case {name!r}" if isinstance(name, str) else f"case #{loc[1] + 1}"), loc[2:]
    return "file", loc


def parse_tests(text: str, *, source: str = "<tests>") -> TestFile:
    """Parse a test file. Raises :class:`ConfigError` listing every problem
    (``file: case 'name': field: reason``)."""
    try:
        doc = strict_yaml.load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: YAML: {exc}", reason="tests_invalid") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: top level: must be a mapping", reason="tests_invalid")
    if "source" in doc:
        raise ConfigError(f"{source}: file: source: unknown field", reason="tests_invalid")
    duplicates = _duplicate_names(doc, source)
    try:
        return TestFile.model_validate({**doc, "source": source})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where, loc = _where(doc, list(err["loc"]))
            # Pydantic reports a union/literal failure once per branch; keep the field.
            field = ".".join(str(p) for p in loc if not str(p).startswith("function-"))
            msg = str(err["msg"]).removeprefix("Value error, ")
            if msg.startswith(_DUPLICATE):
                continue  # reported by _duplicate_names, with the case and both positions
            problems.append(f"{source}: {where}: {field + ': ' if field else ''}{msg}")
        problems += duplicates
        raise ConfigError("\n".join(dict.fromkeys(problems)), reason="tests_invalid") from exc


def load_tests(path: Path) -> TestFile:
    """Load a test file; see :func:`parse_tests`. Raises ConfigError if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read tests: {exc}", reason="tests_invalid") from exc
    return parse_tests(text, source=str(path))


def discover_tests(bundle: Path) -> list[Path]:
    """The test files of ``bundle`` (``DIR/NAME.yaml``): ``DIR/tests/NAME.yaml`` and
    ``DIR/tests/NAME.*.yaml``, sorted. A separate folder keeps test files out of globs
    that load every bundle of ``DIR``."""
    folder = bundle.parent / "tests"
    stem = bundle.stem
    found = {folder / f"{stem}{bundle.suffix}", *folder.glob(f"{stem}.*{bundle.suffix}")}
    return sorted(p for p in found if p.is_file())


__all__ = [
    "ERROR_NAMES",
    "AgentSpec",
    "ArgProvenance",
    "Case",
    "Expect",
    "HistoryStep",
    "SessionSpec",
    "Step",
    "TestFile",
    "discover_tests",
    "load_tests",
    "parse_tests",
]
