"""CEL conditions (library ``common-expression-language``).

A condition is compiled once at bundle load. Compilation refuses syntax errors
and any free variable Warden does not provide; names bound by comprehension
macros (``args.exists(k, …)``) are recognised and allowed, and a string literal
passed as ``re_find``'s pattern must compile as RE2. Evaluation errors
(missing key, type mismatch, non-bool result) raise :class:`ConditionError`;
the engine turns that into a fail-closed deny.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import re
import sys
import threading
import types
from typing import Any

import re2

# The ``cel`` package's __init__ imports its interactive shell (``cel.cli``: prompt_toolkit,
# pygments, rich), which Warden never uses and which costs every process ~0.1 s at start.
# An empty module stands in for it unless something imported the real one first.
sys.modules.setdefault("cel.cli", types.ModuleType("cel.cli"))
import cel  # noqa: E402 - after the stand-in above

#: Variables a rule condition may use (docs/policy-bundles.md).
CONDITION_VARIABLES = frozenset(
    {"method", "tool", "args", "raw_command", "payload", "metadata", "session", "data"}
    | {"provenance", "mcp", "agent", "claims"}
)

#: Variables a spend charge's ``budget_expr`` may use: only facts Warden verified (the
#: agent's registered identity, the session it is bound to) and the bundle's data, so a
#: budget is never chosen by a field the agent writes (issue 15 item 5).
IDENTITY_VARIABLES = frozenset({"agent", "session", "data"})

#: Variables a spend charge's ``actual`` expression may use: the ``steps/toolCallResult``
#: being settled (docs/policy-bundles.md, "Spend").
RESULT_VARIABLES = frozenset(
    {"method", "tool", "outputs", "exit_status", "reserved", "payload", "metadata", "session"}
    | {"data", "agent", "claims"}
)

#: CEL type identifiers, which the library reports as variables.
_TYPE_NAMES = frozenset(
    {
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "bytes",
        "list",
        "map",
        "null_type",
        "type",
        "dyn",
        "timestamp",
        "duration",
    }
)

_MACROS = r"(?:all|exists|exists_one|map|filter|transformList|transformMap)"


class ConditionError(Exception):
    """A condition failed to compile or evaluate; ``str()`` says why."""


class PatternError(ValueError):
    """A regular expression RE2 cannot compile; ``str()`` says why."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the reason is raised, not written to stderr


def _re2_reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else exc
    if isinstance(reason, bytes):
        return reason.decode("utf-8", "replace")
    return str(reason)


@functools.lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching, no backtracking), cached.

    Raises :class:`PatternError` for syntax RE2 does not support (backreferences,
    lookaround, possessive quantifiers, ``\\Z``) or a pattern over RE2's memory budget.
    """
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raise PatternError(f"RE2 cannot compile pattern `{pattern}`: {_re2_reason(exc)}") from exc


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used by ``re_find``, or None when it compiles."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None


def re_find(text: Any, pattern: Any) -> bool:
    """Warden's CEL function ``re_find(text, pattern)``: whether RE2 finds ``pattern``
    anywhere in ``text``. RE2 runs in time linear in the text whatever the pattern, so
    a hostile argument cannot stall the server (Python's backtracking ``re`` took 28 s
    on 200 KB against ``dd\\s+if=.*\\s+of=/dev/``). Compiled patterns are cached:
    CEL's own ``matches`` recompiles its regex on every call in this library. A pattern
    RE2 cannot compile raises, which fails the evaluation closed."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise TypeError("re_find(text, pattern) takes two strings")
    return compile_pattern(pattern).search(text) is not None


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: map keys as strings, sorted; bytes as base64;
    timestamps as RFC 3339; durations as CEL duration strings (``"1.5s"``)."""
    if isinstance(value, dict):
        items = [(_json_key(k), _jsonable(v)) for k, v in value.items()]
        return dict(sorted(items, key=lambda kv: kv[0]))
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.timedelta):
        return f"{value.total_seconds():g}s"
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # a CEL type value (``type(x)``) and anything else: its name


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    return str(key)


def to_json(value: Any) -> str:
    """Warden's CEL function ``to_json(value)``: compact JSON text of any value (no
    spaces, map keys sorted, non-ASCII kept as is), e.g. ``re_find(to_json(args), p)``
    searches every argument, nested maps and lists included, at once."""
    return json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"))


#: Functions Warden adds to CEL (docs/policy-bundles.md).
FUNCTIONS: dict[str, Any] = {"re_find": re_find, "to_json": to_json}

#: The start of a CEL string or bytes literal: optional r/b prefix, then the quote.
_STRING_LITERAL = re.compile(r"(?P<prefix>[rRbB]{0,2})(?P<quote>'{3}|\"{3}|'|\")")


def _scan(source: str) -> list[tuple[str, str]]:
    """CEL tokens of ``source`` as ``(kind, text)``: kind is ``str`` for a string or
    bytes literal, ``id`` for an identifier, ``(`` ``)`` ``,`` ``.`` for those, ``op``
    for anything else. Best effort (enough to find literal arguments), never raises."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        m = _STRING_LITERAL.match(source, i)
        if m is not None and (m["prefix"] == "" or not source[i - 1 : i].isidentifier()):
            raw = "r" in m["prefix"].lower()
            quote = m["quote"]
            j = m.end()
            while j < n and not source.startswith(quote, j):
                j += 2 if (source[j] == "\\" and not raw) else 1
            end = min(j + len(quote), n)
            tokens.append(("str", source[i:end]))
            i = end
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (source[j].isalnum() or source[j] == "_"):
                j += 1
            tokens.append(("id", source[i:j]))
            i = j
        elif c in "(),.":
            tokens.append((c, c))
            i += 1
        elif c.isspace():
            i += 1
        else:
            tokens.append(("op", c))
            i += 1
    return tokens


def field_reads(source: str, variables: frozenset[str]) -> dict[str, frozenset[str] | None]:
    """For each of ``variables``, the top-level fields ``source`` selects from it
    (``args.amount_usd`` → ``amount_usd``), or None when it may read the variable
    another way (a macro or method on it, ``size(args)``, ``args[k]``, ``has(args)``, a
    comprehension variable of the same name, an occurrence the tokenizer is unsure of).

    Conservative by construction: only a root occurrence followed by ``.`` and a plain
    field name that is not called counts as a selection, so a rule reading a field
    never finds it pruned away (:meth:`warden.policy.engine.PolicyEngine` passes CEL
    only the fields its candidate rules select; decision 272). Over-inclusion (a string
    literal that looks like a selection) only costs a conversion."""
    tokens = _scan(source)
    out: dict[str, set[str] | None] = {v: set() for v in variables}
    for k, (kind, text) in enumerate(tokens):
        if kind != "id" or text not in out or (k > 0 and tokens[k - 1][0] == "."):
            continue
        fields = out[text]
        if fields is None:
            continue
        dot, name, after = tokens[k + 1 : k + 2], tokens[k + 2 : k + 3], tokens[k + 3 : k + 4]
        if dot == [(".", ".")] and name and name[0][0] == "id" and after != [("(", "(")]:
            fields.add(name[0][1])
        else:
            out[text] = None
    # A variable the compiler says is read but no selection of it was seen: read whole.
    return {v: (frozenset(f) if f else None) for v, f in out.items()}


def literal_arguments(source: str, function: str, position: int) -> list[str]:
    """The values of string literals passed as argument ``position`` (0-based) to
    ``function`` in a CEL expression, as ``function(a, b)`` or ``a.function(b)``.
    Best effort: arguments that are not one plain string literal are skipped."""
    tokens = _scan(source)
    found: list[str] = []
    for k, (kind, text) in enumerate(tokens):
        if kind != "id" or text != function or tokens[k + 1 : k + 2] != [("(", "(")]:
            continue
        index = position - 1 if k > 0 and tokens[k - 1][0] == "." else position
        if index < 0:
            continue
        args: list[list[tuple[str, str]]] = [[]]
        depth = 0
        for tok in tokens[k + 2 :]:
            if tok[0] == "(":
                depth += 1
            elif tok[0] == ")":
                if depth == 0:
                    break
                depth -= 1
            elif tok[0] == "," and depth == 0:
                args.append([])
                continue
            args[-1].append(tok)
        if index < len(args) and len(args[index]) == 1 and args[index][0][0] == "str":
            try:
                value = cel.evaluate(args[index][0][1])
            except Exception:  # noqa: BLE001 - not a literal after all: skip it
                continue
            if isinstance(value, str):
                found.append(value)
    return found


class Expression:
    """A compiled CEL expression of any result type; ``variables`` are the Warden variables
    it reads, out of ``allowed`` (a name outside it is refused at compile time)."""

    __slots__ = ("_program", "fields", "source", "variables")

    def __init__(self, source: str, *, allowed: frozenset[str] = CONDITION_VARIABLES) -> None:
        self.source = source
        try:
            self._program = cel.compile(source)
        except (ValueError, RuntimeError, TypeError) as exc:
            raise ConditionError(f"does not compile: {exc}") from exc
        bound = set(re.findall(rf"\.{_MACROS}\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,", source))
        try:
            names = set(self._program.variables())
        except (ValueError, RuntimeError) as exc:  # pragma: no cover - library guarantee
            raise ConditionError(f"cannot analyse variables: {exc}") from exc
        self.variables = frozenset(names & allowed)
        #: Per variable read, the fields it selects (None: read whole); see field_reads.
        self.fields = field_reads(source, self.variables)
        undefined = sorted(names - allowed - _TYPE_NAMES - bound)
        if undefined:
            raise ConditionError(
                f"names undefined variable(s) {undefined}; available: {sorted(allowed)}"
            )
        bad = [why for p in literal_arguments(source, "re_find", 1) if (why := pattern_problem(p))]
        if bad:
            raise ConditionError("re_find: " + "; ".join(bad))

    def value(self, context: Any) -> Any:
        """Evaluate against a ``cel.Context`` (or dict); raise ConditionError on any error."""
        try:
            return self._program.execute(context)
        except Exception as exc:  # noqa: BLE001 - foreign errors translated here (one boundary)
            raise ConditionError(f"evaluation failed: {type(exc).__name__}: {exc}") from exc


class Condition(Expression):
    """A compiled CEL boolean expression (a rule's ``when``)."""

    __slots__ = ()

    def evaluate(self, context: Any) -> bool:
        """Evaluate against a ``cel.Context`` (or dict); raise ConditionError unless bool."""
        result = self.value(context)
        if not isinstance(result, bool):
            raise ConditionError(f"must evaluate to a bool, got {type(result).__name__}")
        return result


class ContextPool:
    """Per-thread ``cel.Context`` objects holding a bundle's constant ``data``.

    Converting Python values into CEL costs far more than evaluating a rule, so
    ``data`` is converted once per thread and each request converts only the
    variables its candidate rules read (:meth:`for_request`). Every variable a
    condition reads is set for each request before it runs, so no value from an
    earlier request is ever visible to a rule.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self._local = threading.local()

    def for_request(self, variables: dict[str, Any]) -> Any:
        ctx = getattr(self._local, "ctx", None)
        try:
            if ctx is None:
                ctx = cel.Context(variables={"data": self._data}, functions=FUNCTIONS)
                self._local.ctx = ctx
            ctx.update(variables)
        except Exception as exc:  # noqa: BLE001 - foreign errors translated here
            raise ConditionError(f"request cannot be exposed to CEL: {exc}") from exc
        return ctx
