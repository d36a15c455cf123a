"""The per-session provenance graph, ``provenance_summary`` and Intent (ACS §8.3, §8.4, §9).

:class:`SessionProvenance` is a value: :meth:`SessionProvenance.applied` returns the
state after one committed step and never changes the receiver. Warden keeps no table
for it: the state is a pure function of the session's committed chain entries (each
entry stores the request's params exactly as hashed, and its verdict), so
:func:`rebuild` replays them in order (see :mod:`.tracker`). Content enters the graph
only from steps whose verdict let it through (allow or modify): a denied tool output
never reached the agent.

Content the client sent without provenance is labelled by Warden from the hook it came
on (a tool output is ``tool_output`` of its tool, a user message ``user_input``) with
ids ``warden:<step_id>:<path>``; those nodes are ``assigned``. A provenance_id keeps
the node it was first recorded with: a later step cannot relabel it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from warden.provenance.config import ProvenanceSpec
from warden.provenance.model import (
    ORIGINS,
    TRUSTED_ORIGINS,
    UNTRUSTED_ORIGINS,
    Capability,
    Intent,
    Node,
    Trust,
    least,
)

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
INTENT_STEPS = ("steps/sessionStart", "steps/agentTrigger")
_ENTERED = frozenset({"allow", "modify"})


def leaves(value: Any) -> list[str]:
    """The string and number leaves of a JSON value, as text (keys excluded)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int | float):
            out.append(json.dumps(v))
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


@dataclass(frozen=True)
class OutputText:
    """An earlier tool output's text, kept for inference mode."""

    text: str
    provenance_id: str
    source_id: str
    step_id: str


@dataclass(frozen=True)
class SessionProvenance:
    """What Warden knows about a session's data after its last committed step."""

    nodes: dict[str, Node] = field(default_factory=dict)
    step_count: int = 0
    intent: Intent | None = None
    intent_window_closed: bool = False
    user_texts: tuple[str, ...] = ()
    outputs: tuple[OutputText, ...] = ()

    # -- trust and lineage -------------------------------------------------------

    def own_trust(self, pid: str, spec: ProvenanceSpec) -> Trust:
        """The trust of ``pid``'s own origin, before what it derives from."""
        node = self.nodes.get(pid)
        if node is None:
            return Trust.UNKNOWN
        if node.origin in TRUSTED_ORIGINS:
            return Trust.TRUSTED
        if node.origin in UNTRUSTED_ORIGINS:
            return Trust.TRUSTED if spec.is_trusted_source(node.source_id) else Trust.UNTRUSTED
        # agent_generated: only as trusted as what it derives from (nothing known: unknown)
        return Trust.TRUSTED if node.derived_from else Trust.UNKNOWN

    def trust(self, pid: str, spec: ProvenanceSpec) -> Trust:
        """The derived trust of ``pid``: the least trusted origin in its lineage (the
        monotonicity rule, for every origin); ``unknown`` for an id never recorded."""
        return least([self.own_trust(p, spec) for p in self.lineage(pid)])

    def lineage(self, pid: str) -> list[str]:
        """``pid`` and every id it derives from, transitively, breadth first (iterative:
        a long or cyclic chain sent by a client cannot exhaust the stack)."""
        order: list[str] = []
        seen: set[str] = set()
        queue = deque([pid])
        while queue:
            p = queue.popleft()
            if p in seen:
                continue
            seen.add(p)
            order.append(p)
            node = self.nodes.get(p)
            if node is not None:
                queue.extend(node.derived_from)
        return order

    def depths(self) -> dict[str, int]:
        """Longest ``derived_from`` chain below each recorded node (an edge that closes
        a cycle counts as 0); iterative, linear in nodes and edges."""
        depth: dict[str, int] = {}
        active: set[str] = set()
        for root in self.nodes:
            if root in depth:
                continue
            stack: list[tuple[str, int]] = [(root, 0)]
            while stack:
                pid, i = stack.pop()
                node = self.nodes.get(pid)
                parents = node.derived_from if node is not None else ()
                if i == 0:
                    active.add(pid)
                if i < len(parents):
                    stack.append((pid, i + 1))
                    child = parents[i]
                    if child not in depth and child not in active and child in self.nodes:
                        stack.append((child, 0))
                    continue
                active.discard(pid)
                depth[pid] = max(
                    (
                        1 + depth.get(c, 0) if c in depth or c not in self.nodes else 0
                        for c in parents
                        if c not in active
                    ),
                    default=0,
                )
        return depth

    def entered(self, spec: ProvenanceSpec) -> list[Node]:
        """Nodes of untrusted content that entered through an input step, oldest first."""
        return [
            n
            for n in self.nodes.values()
            if n.step_type in INPUT_STEPS and self.trust(n.provenance_id, spec) is Trust.UNTRUSTED
        ]

    def summary(self) -> dict[str, Any]:
        """The session-level ``provenance_summary`` (ACS provenance-summary.json)."""
        by_origin: dict[str, int] = {}
        earliest: dict[str, str] = {}
        for node in self.nodes.values():
            by_origin[node.origin] = by_origin.get(node.origin, 0) + 1
            earliest.setdefault(node.origin, node.step_id)
        return {
            "origins_seen": [o for o in ORIGINS if o in by_origin],
            "entry_count": len(self.nodes),
            "entry_count_by_origin": by_origin,
            "earliest_step_id_by_origin": earliest,
            "max_lineage_depth": max(self.depths().values(), default=0),
        }

    # -- one committed step ------------------------------------------------------

    def applied(
        self,
        method: str,
        params: dict[str, Any],
        decision: str,
        intent_extension: dict[str, Any] | None = None,
    ) -> SessionProvenance:
        """The state after the committed step ``params`` (decided ``decision``)."""
        step_id = str(params.get("request_id", ""))
        payload = params.get("payload") or {}
        index = self.step_count
        nodes = dict(self.nodes)
        user_texts = list(self.user_texts)
        outputs = list(self.outputs)
        intent = self.intent
        window_closed = self.intent_window_closed
        passed = decision in _ENTERED

        def add(prov: Any, default_origin: str, source: str, path: str) -> str:
            if isinstance(prov, dict) and isinstance(prov.get("provenance_id"), str):
                pid = str(prov["provenance_id"])
                if pid not in nodes:
                    nodes[pid] = Node(
                        pid,
                        str(prov.get("origin", default_origin)),
                        str(prov.get("source_id", source) or ""),
                        tuple(str(p) for p in prov.get("derived_from") or ()),
                        step_id,
                        index,
                        method,
                    )
                return pid
            pid = f"warden:{step_id}:{path}"
            if pid not in nodes:
                nodes[pid] = Node(pid, default_origin, source, (), step_id, index, method, True)
            return pid

        if passed:
            for item in _data_fields(method, payload):
                pid = add(item.prov, item.origin, item.source, item.path)
                if item.kind == "user":
                    user_texts.append("\n".join(leaves(item.value)))
                elif item.kind == "output":
                    node = nodes[pid]
                    outputs.append(
                        OutputText("\n".join(leaves(item.value)), pid, node.source_id, step_id)
                    )
            if method in INTENT_STEPS and not window_closed and intent is None:
                declared = payload.get("intent")
                if isinstance(declared, dict):
                    intent = Intent.from_payload(declared, step_id)
            if intent is not None and intent_extension is not None:
                intent = replace(
                    intent,
                    extensions=(*intent.extensions, Capability.from_json(intent_extension)),
                )
        if method == "steps/agentTrigger":
            window_closed = True
        return SessionProvenance(
            nodes=nodes,
            step_count=index + 1,
            intent=intent,
            intent_window_closed=window_closed,
            user_texts=tuple(user_texts),
            outputs=tuple(outputs),
        )


@dataclass(frozen=True)
class DataField:
    """One data-bearing field of a step: its provenance (if sent) and Warden's default."""

    value: Any
    prov: Any
    origin: str
    source: str
    path: str
    kind: str  # "user", "output" or "other"


def _data_fields(method: str, payload: dict[str, Any]) -> Iterable[DataField]:
    """The data-bearing fields of a step payload (ACS §9), with the origin Warden assigns
    when the client sent no provenance."""
    tool = payload.get("tool") if isinstance(payload.get("tool"), dict) else {}
    tool_name = str((tool or {}).get("name", ""))
    if method == "steps/userMessage":
        for i, c in enumerate(payload.get("content") or ()):
            yield DataField(
                c.get("value"), c.get("provenance"), "user_input", "", f"content/{i}", "user"
            )
    elif method == "steps/agentResponse":
        for i, c in enumerate(payload.get("content") or ()):
            yield DataField(
                c.get("value"), c.get("provenance"), "agent_generated", "", f"content/{i}", "other"
            )
    elif method == "steps/toolCallResult":
        for i, o in enumerate(payload.get("outputs") or ()):
            yield DataField(
                o.get("value"),
                o.get("provenance"),
                "tool_output",
                tool_name,
                f"outputs/{i}",
                "output",
            )
    elif method == "steps/toolCallRequest":
        for name, a in (payload.get("arguments") or {}).items():
            if isinstance(a, dict) and isinstance(a.get("provenance"), dict):
                yield DataField(
                    a.get("value"),
                    a["provenance"],
                    "agent_generated",
                    "",
                    f"arguments/{name}",
                    "other",
                )
    elif method == "steps/knowledgeRetrieval":
        source = payload.get("source") if isinstance(payload.get("source"), dict) else {}
        name = str((source or {}).get("name", "knowledge"))
        q = payload.get("query")
        if isinstance(q, dict):
            yield DataField(
                q.get("value"), q.get("provenance"), "agent_generated", "", "query", "other"
            )
        for i, r in enumerate(payload.get("results") or ()):
            yield DataField(
                r.get("value"),
                r.get("provenance"),
                "retrieved",
                str(r.get("source_id", name)),
                f"results/{i}",
                "output",
            )
    elif method == "steps/memoryContextRetrieval":
        store = payload.get("memory_store") if isinstance(payload.get("memory_store"), dict) else {}
        name = str((store or {}).get("name", "memory"))
        for i, r in enumerate(payload.get("results") or ()):
            yield DataField(
                r.get("value"), r.get("provenance"), "retrieved", name, f"results/{i}", "output"
            )
    elif method in ("steps/memoryStore",):
        c = payload.get("content")
        if isinstance(c, dict):
            yield DataField(
                c.get("value"), c.get("provenance"), "agent_generated", "", "content", "other"
            )
    elif method in ("steps/postCompact", "steps/subagentStop", "steps/turnEnd"):
        s = payload.get("summary")
        if isinstance(s, dict) and isinstance(s.get("provenance"), dict):
            yield DataField(
                s.get("value"), s["provenance"], "agent_generated", "", "summary", "other"
            )


def rebuild(records: Iterable[dict[str, Any]]) -> tuple[SessionProvenance, str | None]:
    """The state after a session's committed entry records (``warden export`` shapes,
    in chain order) and the chain head it corresponds to."""
    state = SessionProvenance()
    head: str | None = None
    for rec in records:
        if rec.get("kind") != "entry":
            continue
        entry = rec["entry"]
        head = entry.get("entry_hash")
        verdict = entry.get("verdict") or {}
        raw = rec.get("request")
        params = json.loads(raw) if isinstance(raw, str) else {"request_id": entry.get("step_id")}
        state = state.applied(
            str(entry.get("step_type", "")),
            params,
            str(verdict.get("decision", "")),
            verdict.get("intent_extension"),
        )
    return state, head
