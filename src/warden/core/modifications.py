"""MODIFY fitness (ACS spec §6.3): which ``modifications`` objects may be sent.

- ``modified_content`` is exclusive: never combined with redactions or overrides.
- ``redactions`` and ``parameter_overrides`` may coexist only on disjoint
  targets — no same field, ancestor or descendant. Parameter overrides address
  ``/arguments/<name>`` on native hooks and ``/params/arguments/<name>`` on
  wrapped MCP (REF choice); pointer segments are escaped (``~``→``~0``, ``/``→``~1``).
- The object has at least one member.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ModificationConflict(ValueError):
    """The modifications object violates §6.3."""


def escape_pointer_segment(segment: str) -> str:
    """RFC 6901 escaping of one JSON-pointer segment."""
    return segment.replace("~", "~0").replace("/", "~1")


def _segments(pointer: str) -> tuple[str, ...]:
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ModificationConflict(f"redaction path {pointer!r} is not a JSON pointer")
    return tuple(s.replace("~1", "/").replace("~0", "~") for s in pointer[1:].split("/"))


def _overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def check_modifications(mods: Mapping[str, Any], *, wrapped_mcp: bool = False) -> None:
    """Raise :class:`ModificationConflict` if ``mods`` violates §6.3."""
    if not mods:
        raise ModificationConflict("modifications must have at least one member")
    unknown = set(mods) - {"modified_content", "redactions", "parameter_overrides"}
    if unknown:
        raise ModificationConflict(f"unknown modification members {sorted(unknown)}")
    if "modified_content" in mods and len(mods) > 1:
        raise ModificationConflict("modified_content cannot be combined with other edits")
    base = ("params", "arguments") if wrapped_mcp else ("arguments",)
    targets: list[tuple[str, ...]] = [
        base + (name,) for name in mods.get("parameter_overrides", {}) or {}
    ]
    for red in mods.get("redactions", []) or []:
        path = _segments(str(red.get("path", "")))
        for seen in targets:
            if _overlaps(seen, path):
                raise ModificationConflict(
                    f"redaction {red.get('path')!r} overlaps another edit target "
                    f"/{'/'.join(escape_pointer_segment(s) for s in seen)}"
                )
        targets.append(path)
