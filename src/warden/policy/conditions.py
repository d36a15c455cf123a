"""CEL conditions (library ``common-expression-language``).

A condition is compiled once at bundle load. Compilation refuses syntax errors
and any free variable Warden does not provide; names bound by comprehension
macros (``args.exists(k, …)``) are recognised and allowed. Evaluation errors
(missing key, type mismatch, non-bool result) raise :class:`ConditionError`;
the engine turns that into a fail-closed deny.
"""

from __future__ import annotations

import re
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


class Condition:
    """A compiled CEL boolean expression."""

    __slots__ = ("_program", "source")

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


def make_context(variables: dict[str, Any]) -> Any:
    """Build a reusable ``cel.Context`` (converted once, evaluated many times)."""
    try:
        return cel.Context(variables=variables)
    except Exception as exc:  # noqa: BLE001 - foreign errors translated here
        raise ConditionError(f"request cannot be exposed to CEL: {exc}") from exc
