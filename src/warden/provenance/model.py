"""Origins, trust and Intent (specs/acs.md §9; ACS ``provenance.json``).

Trust is derived from the recorded origin, never sent as a label: ``user_input`` and
``system`` are trusted; ``tool_output``, ``retrieved``, ``a2a_inbound`` and ``external``
untrusted (unless the bundle names their ``source_id`` a trusted source);
``agent_generated`` is the least trusted of what its lineage reaches (the monotonicity
rule), and ``unknown`` when it reaches no recorded node of another origin. The recorded
origin is the client's claim checked against the hook (see :mod:`.graph`).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ORIGINS: tuple[str, ...] = (
    "user_input",
    "system",
    "tool_output",
    "retrieved",
    "agent_generated",
    "a2a_inbound",
    "external",
)
TRUSTED_ORIGINS = frozenset({"user_input", "system"})
UNTRUSTED_ORIGINS = frozenset({"tool_output", "retrieved", "a2a_inbound", "external"})
#: Steps whose content comes from outside the agent (where untrusted content "enters").
INPUT_STEPS = frozenset(
    {
        "steps/userMessage",
        "steps/toolCallResult",
        "steps/knowledgeRetrieval",
        "steps/memoryContextRetrieval",
        "steps/subagentStop",
    }
)


class Trust(StrEnum):
    """Integrity label. Ordered: untrusted < unknown < trusted (``min`` = least trusted)."""

    UNTRUSTED = "untrusted"
    UNKNOWN = "unknown"
    TRUSTED = "trusted"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Trust.UNTRUSTED: 0, Trust.UNKNOWN: 1, Trust.TRUSTED: 2}


def least(labels: list[Trust]) -> Trust:
    """The least trusted of ``labels`` (``unknown`` for none)."""
    return min(labels, key=lambda t: t.rank) if labels else Trust.UNKNOWN


@dataclass(frozen=True, slots=True)
class Node:
    """One provenance object as Warden recorded it: where and when it entered.

    ``step_id`` is the request_id of the step that carried it and ``step_index`` that
    step's 0-based position in the session; ``assigned`` is True when Warden labelled
    content the client sent without provenance (a tool output is ``tool_output`` of its
    tool, a user message ``user_input``).
    """

    provenance_id: str
    origin: str
    source_id: str
    derived_from: tuple[str, ...]
    step_id: str
    step_index: int
    step_type: str
    assigned: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provenance_id": self.provenance_id, "origin": self.origin}
        if self.source_id:
            out["source_id"] = self.source_id
        if self.derived_from:
            out["derived_from"] = list(self.derived_from)
        out["step_id"] = self.step_id
        return out


@dataclass(frozen=True)
class Capability:
    """One capability of an Intent's ``parsed`` list (REF-GO ``{tool?, operation?,
    resource?}``); an absent member matches anything, a present one is a glob."""

    tool: str = ""
    operation: str = ""
    resource: str = ""

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Capability:
        return cls(
            str(item.get("tool", "")), str(item.get("operation", "")), str(item.get("resource", ""))
        )

    def to_json(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (
                ("tool", self.tool),
                ("operation", self.operation),
                ("resource", self.resource),
            )
            if v
        }

    def covers(self, requested: Capability) -> bool:
        """Whether this intent capability admits ``requested`` (each present member a glob)."""
        for mine, theirs in (
            (self.tool, requested.tool),
            (self.operation, requested.operation),
            (self.resource, requested.resource),
        ):
            if mine and not fnmatch.fnmatchcase(theirs, mine):
                return False
        return True


@dataclass(frozen=True)
class Intent:
    """The session's declared purpose (§8.4), fixed at sessionStart or the first
    agentTrigger; ``step_id`` is where it was fixed, ``extensions`` the capabilities
    added since by approved ``intent_extension`` steps."""

    raw: str
    parsed: tuple[Capability, ...]
    parser_provenance: dict[str, Any] | None
    scope_mode: str
    step_id: str
    extensions: tuple[Capability, ...] = ()

    @classmethod
    def from_payload(cls, intent: dict[str, Any], step_id: str) -> Intent:
        return cls(
            raw=str(intent.get("raw", "")),
            parsed=tuple(Capability.from_json(c) for c in intent.get("parsed") or ()),
            parser_provenance=intent.get("parser_provenance"),
            scope_mode=str(intent.get("scope_mode", "")),
            step_id=step_id,
        )

    @property
    def capabilities(self) -> tuple[Capability, ...]:
        return self.parsed + self.extensions

    def same_declaration(self, intent: dict[str, Any]) -> bool:
        """Whether a later step's ``intent`` member restates this one unchanged."""
        other = Intent.from_payload(intent, self.step_id)
        return (other.raw, other.parsed, other.scope_mode) == (
            self.raw,
            self.parsed,
            self.scope_mode,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "raw": self.raw,
            "parsed": [c.to_json() for c in self.parsed],
            "scope_mode": self.scope_mode,
            "fixed_at_step_id": self.step_id,
        }
        if self.parser_provenance is not None:
            out["parser_provenance"] = self.parser_provenance
        if self.extensions:
            out["extensions"] = [c.to_json() for c in self.extensions]
        return out
