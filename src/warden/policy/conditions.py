"""CEL conditions (library ``common-expression-language``).

A condition is compiled once at bundle load. Compilation refuses syntax errors
and any free variable Warden does not provide; names bound by comprehension
macros (``args.exists(k, …)``) are recognised and allowed. Evaluation errors
(missing key, type mismatch, non-bool result) raise :class:`ConditionError`;
the engine turns that into a fail-closed deny.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

import cel

#: Variables a rule condition may use (docs/policy-bundles.md).
CONDITION_VARIABLES = frozenset(
    {"method", "tool", "args", "raw_command", "payload", "metadata", "session", "data"}
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


def re_find(text: Any, pattern: Any) -> bool:
    """Warden's CEL function ``re_find(text, pattern)``: Python ``re.search`` with a
    compiled-pattern cache. CEL's own ``matches`` recompiles its regex on every
    call in this library (~25 µs each), which a hot rule cannot afford."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise TypeError("re_find(text, pattern) takes two strings")
    return _compiled(pattern).search(text) is not None


@functools.lru_cache(maxsize=2048)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


#: Functions Warden adds to CEL (docs/policy-bundles.md).
FUNCTIONS: dict[str, Any] = {"re_find": re_find}


class Condition:
    """A compiled CEL boolean expression; ``variables`` are the Warden variables it reads."""

    __slots__ = ("_program", "source", "variables")

    def __init__(self, source: str) -> None:
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
        self.variables = frozenset(names & CONDITION_VARIABLES)
        undefined = sorted(names - CONDITION_VARIABLES - _TYPE_NAMES - bound)
        if undefined:
            raise ConditionError(
                f"names undefined variable(s) {undefined}; available: {sorted(CONDITION_VARIABLES)}"
            )

    def evaluate(self, context: Any) -> bool:
        """Evaluate against a ``cel.Context`` (or dict); raise ConditionError unless bool."""
        try:
            result = self._program.execute(context)
        except Exception as exc:  # noqa: BLE001 - foreign errors translated here (one boundary)
            raise ConditionError(f"evaluation failed: {type(exc).__name__}: {exc}") from exc
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
