"""The per-session provenance graph, ``provenance_summary`` and Intent (ACS §8.3, §8.4, §9).

:class:`SessionProvenance` is a value: :meth:`SessionProvenance.applied` returns the
state after one committed step and never changes the receiver. Warden keeps no table
for it: the state is a pure function of the session's committed chain entries (each
entry stores the request's params exactly as hashed, and its verdict), so
:func:`rebuild` replays them in order (see :mod:`.tracker`). Content enters the graph
only from steps whose verdict let it through (allow or modify): a denied tool output
never reached the agent.

What the client claims is checked against the hook it arrived on (:func:`intake`):

- content the client sent without provenance is labelled from its hook (a tool output
  is ``tool_output`` of its tool, a user message ``user_input``) with ids
  ``warden:<step_id>:<path>``; those nodes are ``assigned``;
- a tool output or retrieval result is at most untrusted: a claimed ``user_input``,
  ``system`` or ``agent_generated`` origin becomes the hook's (``tool_output`` /
  ``retrieved``), and its ``source_id`` is always the hook's tool or source name;
- agent-side content (tool arguments, agent responses, memory writes, summaries) cannot
  introduce a trusted origin: a fresh ``user_input``/``system`` node becomes
  ``agent_generated`` with what it claims to derive from (so ``unknown`` if nothing);
- a ``provenance_id`` is unique within the session (ACS §9): content that reuses a
  recorded id is refused by the service (``-32602``); a tool argument may *reference* a
  recorded id (the argument is that data), and the recorded node wins.

Every such change is an :class:`Override`, reported in ``policy_data.provenance``.

Trust (:meth:`SessionProvenance.trust`): a recorded node of a non-``agent_generated``
origin contributes its own trust; an id named in ``derived_from`` but never recorded
contributes ``unknown``; ``agent_generated`` contributes nothing of its own. A node's
trust is the least contribution its lineage reaches, and ``unknown`` when it reaches none
(only itself, cycles of ``agent_generated`` nodes, unknown ids). Trust and depth are
kept per graph version by strongly connected components and updated for what each step
adds (its nodes, and the earlier nodes naming an id it records), not recomputed for the
whole graph: see :mod:`.shared`.
"""

from __future__ import annotations

import json
import unicodedata
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from warden.provenance.config import ProvenanceSpec
from warden.provenance.forms import canonical
from warden.provenance.model import (
    INPUT_STEPS,
    ORIGINS,
    TRUSTED_ORIGINS,
    UNTRUSTED_ORIGINS,
    Capability,
    Intent,
    Node,
    Trust,
)
from warden.provenance.shared import GraphView

__all__ = ["INPUT_STEPS", "GraphView", "SessionProvenance", "intake", "rebuild"]

INTENT_STEPS = ("steps/sessionStart", "steps/agentTrigger")
_ENTERED = frozenset({"allow", "modify"})
#: Ids Warden assigns; a client may reference them but not introduce one.
WARDEN_PREFIX = "warden:"
#: Inference: a tool-output token at least this long is matched inside arguments.
TOKEN_MIN = 8
_NO_TOKENS: frozenset[str] = frozenset()  # shared: one object fewer per short output
_TOKEN_STRIP = " \t\r\n.,;:!?()[]{}<>\"'`*"


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


def normalise(text: str) -> str:
    """``text`` for inference matching: NFKC, case-folded, without whitespace and without
    format characters (zero-width spaces and joiners, bidi marks: Unicode category Cf)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if not ch.isspace() and unicodedata.category(ch) != "Cf")


def tokens(text: str) -> frozenset[str]:
    """The normalised whitespace-separated tokens of ``text`` (surrounding punctuation
    stripped) of at least :data:`TOKEN_MIN` characters."""
    out = set()
    for raw in text.split():
        tok = normalise(raw.strip(_TOKEN_STRIP))
        if len(tok) >= TOKEN_MIN:
            out.add(tok)
    return frozenset(out) if out else _NO_TOKENS


@dataclass(frozen=True)
class OutputText:
    """An earlier tool output, kept for inference mode: its normalised text and tokens,
    and the canonical form of the text (:func:`~.forms.canonical`: URLs and e-mail
    addresses in one spelling)."""

    text: str
    provenance_id: str
    source_id: str
    step_id: str
    tokens: frozenset[str] = frozenset()
    canon: str = ""
    #: The tokens whose canonical form differs from the token (URLs, e-mail addresses),
    #: as (token, canonical form).
    canon_tokens: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, raw: str, provenance_id: str, source_id: str, step_id: str) -> OutputText:
        text = normalise(raw)
        canon = canonical(text)
        toks = tokens(raw)
        pairs = tuple((t, c) for t in sorted(toks) if (c := canonical(t)) != t and c)
        return cls(
            text,
            provenance_id,
            source_id,
            step_id,
            toks,
            canon if canon != text else "",
            pairs,
        )

    def contains(self, norm: str, canon: str) -> bool:
        """Whether a normalised value (or its canonical form) occurs in this output."""
        return norm in self.text or (canon in (self.canon or self.text))


@dataclass(frozen=True)
class Override:
    """A label Warden changed: what the client claimed and what was recorded instead."""

    provenance_id: str
    path: str
    claimed_origin: str
    origin: str
    claimed_source_id: str
    source_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "provenance_id": self.provenance_id,
            "path": self.path,
            "claimed_origin": self.claimed_origin,
            "origin": self.origin,
            "reason": self.reason,
        }
        if self.claimed_source_id or self.source_id:
            out["claimed_source_id"] = self.claimed_source_id
            out["source_id"] = self.source_id
        return out


@dataclass(frozen=True)
class Intake:
    """What one step would add: new nodes (in order), argument references to recorded
    nodes, label overrides, and the first problem that makes the step unacceptable
    (``(json pointer, message)``; the service answers ``-32602``)."""

    nodes: tuple[Node, ...] = ()
    refs: dict[str, str] = field(default_factory=dict)  # argument path -> recorded id
    overrides: tuple[Override, ...] = ()
    problem: tuple[str, str] | None = None


@dataclass(frozen=True)
class SessionProvenance:
    """What Warden knows about a session's data after its last committed step.

    ``nodes`` is a :class:`~warden.provenance.shared.GraphView`: the session's shared,
    append-only graph up to this state, so a step adds its own nodes without copying the
    others, and trust and depth are updated for what the step adds (:mod:`.shared`)."""

    nodes: GraphView = field(default_factory=GraphView)
    step_count: int = 0
    intent: Intent | None = None
    intent_window_closed: bool = False
    seen_session_start: bool = False
    seen_agent_trigger: bool = False
    user_texts: tuple[str, ...] = ()  # normalised (see :func:`normalise`)
    outputs: tuple[OutputText, ...] = ()
    #: Characters held by ``user_texts`` and ``outputs`` (for the cache's byte budget).
    text_chars: int = field(default=0, compare=False)
    _lineages: dict[str, list[str]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    # -- trust and lineage -------------------------------------------------------

    def trust(self, pid: str, spec: ProvenanceSpec) -> Trust:
        """The derived trust of ``pid`` (module docstring); ``unknown`` for an id never
        recorded, or whose lineage reaches no recorded non-``agent_generated`` node."""
        if pid not in self.nodes:
            return Trust.UNKNOWN
        return self.nodes.reach(pid, spec) or Trust.UNKNOWN

    def depth(self, pid: str, spec: ProvenanceSpec) -> int:
        """Longest ``derived_from`` chain below ``pid`` (0 when it derives from nothing)."""
        return self.nodes.depth_of(pid, spec) if pid in self.nodes else 0

    def max_depth(self, spec: ProvenanceSpec | None = None) -> int:
        """The deepest lineage in the session (depth does not depend on the bundle's
        trusted sources, so any spec gives the same answer; default: one already used)."""
        return self.nodes.max_depth(spec if spec is not None else self._any_spec())

    def _any_spec(self) -> ProvenanceSpec:
        for memo in list(self.nodes.graph.memos.values()):
            return memo.spec
        return _PLAIN

    def lineage(self, pid: str) -> list[str]:
        """``pid`` and every id it derives from, transitively, breadth first (iterative;
        memoised per graph version)."""
        cache = self._lineages
        hit = cache.get(pid)
        if hit is not None:
            return hit
        order: list[str] = []
        seen: set[str] = set()
        queue = deque([pid])
        nodes = self.nodes
        while queue:
            p = queue.popleft()
            if p in seen:
                continue
            seen.add(p)
            order.append(p)
            node = nodes.get(p)
            if node is not None:
                queue.extend(node.derived_from)
        cache[pid] = order
        return order

    def depths(self, spec: ProvenanceSpec | None = None) -> dict[str, int]:
        """Depth of every recorded node (see :func:`~warden.provenance.shared.components`)."""
        use = spec if spec is not None else self._any_spec()
        return {p: self.nodes.depth_of(p, use) for p in self.nodes}

    def entered(self, spec: ProvenanceSpec) -> list[Node]:
        """Nodes of untrusted content that entered through an input step, oldest first."""
        return self.nodes.entered(spec)

    def summary(self) -> dict[str, Any]:
        """The session-level ``provenance_summary`` (ACS provenance-summary.json)."""
        by_origin, earliest = self.nodes.origin_counts()
        return {
            "origins_seen": [o for o in ORIGINS if o in by_origin],
            "entry_count": len(self.nodes),
            "entry_count_by_origin": by_origin,
            "earliest_step_id_by_origin": earliest,
            "max_lineage_depth": self.max_depth(),
        }

    def approx_bytes(self) -> int:
        """Estimated bytes this state keeps alive in the process: its graph (shared with
        the session's other states), its texts and outputs."""
        return (
            self.nodes.approx_bytes()
            + self.text_chars
            + 200 * (len(self.user_texts) + len(self.outputs))
        )

    # -- intent window -----------------------------------------------------------

    def may_set_intent(self, method: str) -> bool:
        """Whether a step of ``method`` may fix the intent now: only the first
        sessionStart or the first agentTrigger, before any other step of the session."""
        if self.intent is not None or self.intent_window_closed:
            return False
        if method == "steps/sessionStart":
            return not self.seen_session_start and not self.seen_agent_trigger
        if method == "steps/agentTrigger":
            return not self.seen_agent_trigger
        return False

    # -- one step ----------------------------------------------------------------

    def check(self, method: str, params: dict[str, Any], spec: ProvenanceSpec) -> Intake:
        """The step's :class:`Intake` with the bundle's limits applied: too many nodes in
        the step or the session, a ``derived_from`` too long, or a lineage deeper than
        allowed is a problem (nothing is recorded)."""
        limits = spec.limits
        taken = intake(self, method, params, derived_limit=limits.derived_from)
        if taken.problem is not None:
            return taken
        if len(taken.nodes) > limits.nodes_per_step:
            return replace(
                taken,
                problem=(
                    "/params/payload",
                    f"this step would add {len(taken.nodes)} provenance nodes; the bundle "
                    f"allows {limits.nodes_per_step} per step (provenance.limits.nodes_per_step)",
                ),
            )
        if len(self.nodes) + len(taken.nodes) > limits.nodes_per_session:
            return replace(
                taken,
                problem=(
                    "/params/payload",
                    f"the session would hold {len(self.nodes) + len(taken.nodes)} provenance "
                    f"nodes; the bundle allows {limits.nodes_per_session} "
                    "(provenance.limits.nodes_per_session)",
                ),
            )
        if not taken.nodes:
            return taken
        after = self.applied(method, params, "allow", _taken=taken)
        deepest = after.max_depth(spec)
        before = self.max_depth(spec)
        if deepest > limits.lineage_depth and deepest > before:
            return replace(
                taken,
                problem=(
                    "/params/payload",
                    f"this step would make a provenance lineage {deepest} deep; the bundle "
                    f"allows {limits.lineage_depth} (provenance.limits.lineage_depth)",
                ),
            )
        return taken

    def applied(
        self,
        method: str,
        params: dict[str, Any],
        decision: str,
        intent_extension: dict[str, Any] | None = None,
        *,
        _taken: Intake | None = None,
    ) -> SessionProvenance:
        """The state after the committed step ``params`` (decided ``decision``)."""
        step_id = str(params.get("request_id", ""))
        payload = params.get("payload") or {}
        intent = self.intent
        passed = decision in _ENTERED
        nodes = self.nodes
        user_texts = self.user_texts
        outputs = self.outputs
        text_chars = self.text_chars
        if passed:
            taken = _taken if _taken is not None else intake(self, method, params)
            if taken.nodes:
                # intake() only returns ids not yet recorded: the graph is extended, not copied.
                nodes = self.nodes.extended(taken.nodes)
            new_users = list(user_texts)
            new_outputs = list(outputs)
            for item in _data_fields(method, payload):
                text = "\n".join(leaves(item.value))
                text_chars += 2 * len(text)
                if item.kind == "user":
                    new_users.append(normalise(text))
                elif item.kind == "output":
                    pid = taken.refs.get(item.path) or _pid_of(item, step_id)
                    got = nodes.get(pid)
                    recorded = OutputText.of(
                        text, pid, got.source_id if got else item.source, step_id
                    )
                    text_chars += len(recorded.canon)
                    new_outputs.append(recorded)
            user_texts, outputs = tuple(new_users), tuple(new_outputs)
            if self.may_set_intent(method):
                declared = payload.get("intent")
                if isinstance(declared, dict):
                    intent = Intent.from_payload(declared, step_id)
            if intent is not None and intent_extension is not None:
                intent = replace(
                    intent,
                    extensions=(*intent.extensions, Capability.from_json(intent_extension)),
                )
        closed = self.intent_window_closed or intent is not None
        if method == "steps/sessionStart":
            closed = closed or self.seen_session_start or self.seen_agent_trigger
        elif method == "steps/agentTrigger":
            closed = True
        else:
            closed = True
        state = SessionProvenance(
            nodes=nodes,
            step_count=self.step_count + 1,
            intent=intent,
            intent_window_closed=closed,
            seen_session_start=self.seen_session_start or method == "steps/sessionStart",
            seen_agent_trigger=self.seen_agent_trigger or method == "steps/agentTrigger",
            user_texts=user_texts,
            outputs=outputs,
            text_chars=text_chars,
        )
        if nodes is self.nodes:
            # Same graph version: lineage carries over (trust and depth live on the view).
            state._lineages.update(self._lineages)
        return state


_PLAIN = ProvenanceSpec()


@dataclass(frozen=True)
class DataField:
    """One data-bearing field of a step: its provenance (if sent) and Warden's default.

    ``kind``: ``user`` (a user message: any claimed origin is kept), ``output`` (tool
    output or retrieval result: at most untrusted, source from the hook), ``agent``
    (agent-side content: no fresh trusted origin) or ``argument`` (a tool argument: as
    ``agent``, and it may reference a recorded id)."""

    value: Any
    prov: Any
    origin: str
    source: str
    path: str
    kind: str


def _pid_of(item: DataField, step_id: str) -> str:
    if isinstance(item.prov, dict) and isinstance(item.prov.get("provenance_id"), str):
        return str(item.prov["provenance_id"])
    return f"{WARDEN_PREFIX}{step_id}:{item.path}"


def _ptr(path: str) -> str:
    head, _, rest = path.partition("/")
    rest = rest.replace("~", "~0").replace("/", "~1")
    return f"/params/payload/{head}" + (f"/{rest}" if rest else "")


def intake(
    state: SessionProvenance,
    method: str,
    params: dict[str, Any],
    derived_limit: int | None = None,
) -> Intake:
    """What step ``params`` adds to ``state`` (module docstring), with label overrides
    and the first problem: a reused or reserved ``provenance_id``, or a ``derived_from``
    longer than ``derived_limit``."""
    step_id = str(params.get("request_id", ""))
    payload = params.get("payload") or {}
    index = state.step_count
    new: dict[str, Node] = {}
    refs: dict[str, str] = {}
    overrides: list[Override] = []
    problem: tuple[str, str] | None = None
    for item in _data_fields(method, payload):
        prov = item.prov
        if not (isinstance(prov, dict) and isinstance(prov.get("provenance_id"), str)):
            pid = f"{WARDEN_PREFIX}{step_id}:{item.path}"
            if pid not in state.nodes and pid not in new:
                new[pid] = Node(pid, item.origin, item.source, (), step_id, index, method, True)
            continue
        pid = str(prov["provenance_id"])
        claimed_origin = str(prov.get("origin", item.origin))
        claimed_source = str(prov.get("source_id", "") or "")
        derived = tuple(str(p) for p in prov.get("derived_from") or ())
        pointer = _ptr(item.path) + "/provenance"
        recorded = state.nodes.get(pid)
        if item.kind == "argument" and recorded is not None:
            refs[item.path] = pid
            if claimed_origin != recorded.origin or (
                claimed_source and claimed_source != recorded.source_id
            ):
                overrides.append(
                    Override(
                        pid,
                        item.path,
                        claimed_origin,
                        recorded.origin,
                        claimed_source,
                        recorded.source_id,
                        "the provenance_id was recorded earlier with another label; "
                        "the recorded one stands",
                    )
                )
            continue
        if problem is None and (recorded is not None or pid in new):
            problem = (
                pointer + "/provenance_id",
                f"provenance_id {pid!r} is already used in this session "
                + (f"(step {recorded.step_id})" if recorded else "(earlier in this step)")
                + "; ids are unique within a session (ACS §9)",
            )
            continue
        if problem is None and pid.startswith(WARDEN_PREFIX):
            problem = (
                pointer + "/provenance_id",
                f"provenance_id {pid!r} uses the prefix {WARDEN_PREFIX!r}, reserved for "
                "labels Warden assigns",
            )
            continue
        if problem is None and derived_limit is not None and len(derived) > derived_limit:
            problem = (
                pointer + "/derived_from",
                f"derived_from names {len(derived)} ids; the bundle allows "
                f"{derived_limit} (provenance.limits.derived_from)",
            )
            continue
        origin, source, reason = claimed_origin, claimed_source, ""
        if item.kind == "output":
            source = item.source
            if claimed_origin not in UNTRUSTED_ORIGINS:
                origin = item.origin
                reason = f"content arriving on {method} is at most {item.origin}"
            elif claimed_source and claimed_source != item.source:
                reason = f"the source of content arriving on {method} is the hook's"
        elif item.kind in ("agent", "argument") and claimed_origin in TRUSTED_ORIGINS:
            origin = "agent_generated"
            reason = (
                "agent-side content cannot introduce a trusted origin Warden never saw; "
                "it is as trusted as what it derives from"
            )
        if reason:
            overrides.append(
                Override(pid, item.path, claimed_origin, origin, claimed_source, source, reason)
            )
        new[pid] = Node(pid, origin, source, derived, step_id, index, method)
    return Intake(tuple(new.values()), refs, tuple(overrides), problem)


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
                c.get("value"), c.get("provenance"), "agent_generated", "", f"content/{i}", "agent"
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
                    "argument",
                )
    elif method == "steps/knowledgeRetrieval":
        source = payload.get("source") if isinstance(payload.get("source"), dict) else {}
        name = str((source or {}).get("name", "knowledge"))
        q = payload.get("query")
        if isinstance(q, dict):
            yield DataField(
                q.get("value"), q.get("provenance"), "agent_generated", "", "query", "agent"
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
                c.get("value"), c.get("provenance"), "agent_generated", "", "content", "agent"
            )
    elif method in ("steps/postCompact", "steps/subagentStop", "steps/turnEnd"):
        s = payload.get("summary")
        if isinstance(s, dict) and isinstance(s.get("provenance"), dict):
            yield DataField(
                s.get("value"), s["provenance"], "agent_generated", "", "summary", "agent"
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
