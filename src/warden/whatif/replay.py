"""Replay recorded decisions through a bundle's Guardian (``warden whatif``; issue 19).

Each recorded ACS decision (hooks and wrapped MCP) is rebuilt from what its entry leaf
recorded and nothing else: the canonical params stored beside the entry (payload,
metadata, request id), the session (its agent id and how its signer was verified), the
step's place in its session (``session.step_count`` is the entry's seq), the verified
agent's facts as the log recorded them (the agents chain's ``registered`` entries; the
registry table only for an agent whose registration is not in the log), and the
session's provenance graph as of the step (folded from the session's earlier entries
with their recorded decisions, as the tracker does live). The request then goes through
:meth:`Guardian.decide <warden.core.guardian.Guardian.decide>` only: no gate runs, so
nothing is written, held, spent or filed (replay is pure).

Faithfulness: the recorded bundle (found by the digest the verdict names, among the
bundles the database stored and ``current``) is run first; a decision whose decision,
fired rules or reason codes differ is *unreproduced*. Where the recorded outcome came
from state policy does not compute it is *marked* and compared at the policy level:

* ``budget``: the spend gate refused a policy allow/modify (``verdict.spend.refused``);
* ``human``: an approver's answer (``approval_granted``/``denied``/``expired``,
  ``grant_invalid``) replaced a policy ask/defer;
* ``preempted``: Warden answered without asking policy (``chain_mismatch``).

The policy-level verdict of the recorded bundle is the "old" side of every comparison;
the candidate's is the "new" one.

The Warden-chain wires' decisions (spend quotes, KLA action requests, AdCP intent
checks) are rebuilt by :mod:`warden.whatif.wires` from their entries' ``decided`` object
with each wire's own request builder, and compared the same way (wires ``spend``,
``kla``, ``adcp``); other Warden-chain entries are counted as skipped by chain.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson

from warden.core.guardian import Guardian
from warden.core.types import NO_AGENT, ActionRequest, Effect, Verdict, agent_facts, user_id_claim
from warden.crypto.hmac_keys import AGENT_KEY_SCHEME
from warden.errors import WardenError
from warden.policy.bundle import Bundle
from warden.policy.engine import PolicyEngine
from warden.provenance.facts import view_for
from warden.provenance.graph import SessionProvenance
from warden.whatif.reader import LoggedSession, LogReader
from warden.whatif.wires import WireStep, WireSteps
from warden.wire.acs.methods import MethodInfo, route
from warden.wire.acs.parse import action_request

#: Reason codes of an approver's answer: the policy verdict under it was ask or defer.
HUMAN_CODES = frozenset(
    {
        "approval_granted",
        "approval_denied",
        "approval_expired",
        "approval_timeout_allow",
        "grant_invalid",
    }
)
#: Reason codes the approval gate adds to an ask it filed and left standing (the task is
#: pending): the policy verdict is unchanged, so they are left out of the comparison.
GATE_CODES = frozenset({"approval_pending"})
#: Reason codes of a verdict Warden gave without asking policy.
PREEMPT_CODES = frozenset({"chain_mismatch"})
_HUMAN_POLICY = frozenset({"ask", "defer"})
_SPEND_POLICY = frozenset({"allow", "modify"})
_STRENGTH = {e.value: e.strength for e in Effect}


@dataclass(frozen=True, slots=True)
class Outcome:
    """A verdict reduced to what a comparison needs: decision, fired rules, reason codes."""

    decision: str
    rules: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "rules": list(self.rules), "codes": list(self.codes)}


def outcome_of(verdict: Verdict) -> Outcome:
    return Outcome(
        verdict.decision.value,
        tuple(r.rule_id for r in verdict.policy_references),
        verdict.reason_codes,
    )


def recorded_outcome(verdict: dict[str, Any]) -> tuple[Outcome, str | None]:
    """An entry's ``verdict`` object as recorded, and its mark (``budget``, ``human``,
    ``preempted``) when state policy does not compute decided it."""
    codes = tuple(str(c) for c in verdict.get("reason_codes") or () if c not in GATE_CODES)
    rules = tuple(str(r.get("rule_id", "")) for r in verdict.get("policy_references") or ())
    out = Outcome(str(verdict.get("decision", "")), rules, codes)
    spend = verdict.get("spend")
    if isinstance(spend, dict) and spend.get("refused") and out.decision == "deny":
        return out, "budget"
    if HUMAN_CODES.intersection(codes):
        return out, "human"
    if PREEMPT_CODES.intersection(codes):
        return out, "preempted"
    return out, None


def reproduces(recorded: Outcome, mark: str | None, replayed: Outcome) -> bool:
    """Whether ``replayed`` (the recorded bundle run again) explains ``recorded``: the same
    decision, rules and codes; for a marked outcome the same rules and a policy decision
    that state then changed (allow/modify for ``budget``, ask/defer for ``human``)."""
    if mark is None:
        return replayed == recorded
    if mark == "budget":
        return replayed.decision in _SPEND_POLICY and replayed.rules == recorded.rules
    if mark == "human":
        return replayed.decision in _HUMAN_POLICY and replayed.rules == recorded.rules
    return True  # preempted: policy was not asked, nothing to compare


def change_kind(old: Outcome, new: Outcome) -> str | None:
    """``loosened`` (a weaker effect: deny/ask → allow …), ``tightened``, ``rules`` (same
    decision, other rules fired) or None (no change)."""
    if old.decision != new.decision:
        if _STRENGTH.get(new.decision, 0) < _STRENGTH.get(old.decision, 0):
            return "loosened"
        return "tightened"
    if set(old.rules) != set(new.rules):
        return "rules"
    return None


@dataclass(slots=True)
class Replayed:
    """One recorded decision replayed. ``old`` is the policy-level verdict of the
    recorded bundle (its replay when that reproduced the record, else the record);
    ``current`` the recorded bundle's replay (None: that bundle is not available);
    ``faithful`` whether it reproduced the record (None: not checked)."""

    log_index: int | None
    session_id: str
    seq: int
    step_id: str
    timestamp: str
    wire: str
    tool: str
    agent: str
    recorded: Outcome
    mark: str | None
    recorded_digest: str
    current: Outcome | None
    faithful: bool | None
    old: Outcome
    new: Outcome

    def example(self) -> dict[str, Any]:
        """The JSON example form (``warden whatif --json``)."""
        return {
            "log_index": self.log_index,
            "session_id": self.session_id,
            "seq": self.seq,
            "step_id": self.step_id,
            "timestamp": self.timestamp,
            "wire": self.wire,
            "tool": self.tool,
            "agent": self.agent,
            "recorded": self.recorded.as_dict(),
            "mark": self.mark,
            "old": self.old.as_dict(),
            "new": self.new.as_dict(),
        }


@dataclass(frozen=True)
class Window:
    """Which recorded decisions to replay: RFC 3339 ``since`` (inclusive) and ``until``
    (exclusive) on the entry's timestamp, and one agent id; None = no bound."""

    since: datetime | None = None
    until: datetime | None = None
    agent: str | None = None

    def admits(self, timestamp: str, agent: str) -> bool:
        if self.agent is not None and agent != self.agent:
            return False
        if self.since is None and self.until is None:
            return True
        try:
            ts = parse_time(timestamp)
        except ValueError:
            return False
        return (self.since is None or ts >= self.since) and (self.until is None or ts < self.until)


def parse_time(value: str) -> datetime:
    """An RFC 3339 timestamp (``Z`` or an offset; naive = UTC) as an aware datetime;
    ValueError otherwise."""
    from datetime import UTC

    ts = datetime.fromisoformat(value.strip().upper().replace("Z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


#: Memoized outcomes kept per bundle before the memo starts over.
MEMO_SIZE = 200_000


class _Judge:
    """A bundle's Guardian with its provenance spec, cached per bundle.

    Without a provenance section a verdict is a function of the request's method, tool
    name and the facts its candidate rules read (:meth:`PolicyEngine.reads`; ``data`` is
    the bundle's own), so outcomes are memoized on those: a history repeats itself (every
    session's lifecycle steps, the same call with the same arguments). With provenance
    the gates read the whole session graph and every step is evaluated."""

    def __init__(self, bundle: Bundle, *, memo: bool = True) -> None:
        self.bundle = bundle
        self.engine = PolicyEngine(bundle)
        self.guardian = Guardian(self.engine)
        self.spec = bundle.provenance
        self.memo: dict[tuple[str, str, bytes], Outcome] | None = {} if memo else None
        self.evaluations = 0

    def decide(
        self,
        request: ActionRequest,
        prior: SessionProvenance | None,
        params: dict[str, Any],
    ) -> Outcome:
        if self.spec is not None and prior is not None:
            request = replace(
                request,
                provenance=view_for(
                    prior, self.spec, request.method, params, request.args, request.tool
                ),
            )
            self.evaluations += 1
            return outcome_of(self.guardian.decide(request))
        if self.memo is None:
            return self._evaluate(request)
        try:
            reads = self.engine.reads(request)
            key = (request.method, request.tool_name, orjson.dumps(reads) if reads else b"")
        except (TypeError, ValueError):
            return self._evaluate(request)
        hit = self.memo.get(key)
        if hit is None:
            hit = self._evaluate(request)
            if len(self.memo) >= MEMO_SIZE:
                self.memo.clear()
            self.memo[key] = hit
        return hit

    def _evaluate(self, request: ActionRequest) -> Outcome:
        """:meth:`Guardian.decide`'s outcome without building its verdict (no provenance:
        the engine, then the hook's permitted set, failing closed as the Guardian does)."""
        self.evaluations += 1
        rules: tuple[str, ...]
        codes: tuple[str, ...]
        try:
            ev = self.engine.evaluate(request)
        except Exception:  # noqa: BLE001 - the Guardian fails closed the same way
            decision, rules, codes = Effect.DENY, (), ("evaluation_failed",)
        else:
            decision, rules, codes = ev.effect, tuple(r.id for r in ev.fired), ev.reason_codes
        if decision not in request.permitted:
            decision = Effect.DENY if Effect.DENY in request.permitted else Effect.ALLOW
            codes = tuple(dict.fromkeys((*codes, "disposition_not_permitted")))
        return Outcome(decision.value, rules, codes)


class Replayer:
    """Replays a log's recorded decisions through ``candidate``; the recorded bundle of
    each decision is looked up by digest in ``bundles`` (e.g. the database's stored
    sources), else ``current`` is used for it (None: not checked)."""

    def __init__(
        self,
        candidate: Bundle,
        *,
        bundles: dict[str, Bundle] | None = None,
        current: Bundle | None = None,
        memo: bool = True,
    ) -> None:
        self.candidate = _Judge(candidate, memo=memo)
        # The candidate itself, when it is a recorded bundle, is judged once per step.
        self._judges: dict[str, _Judge] = {candidate.ref.digest: self.candidate}
        for digest, bundle in (bundles or {}).items():
            if bundle.ref.digest == digest and digest not in self._judges:
                self._judges[digest] = _Judge(bundle, memo=memo)
        self._current: _Judge | None = None
        if current is not None:
            self._current = self._judges.setdefault(current.ref.digest, _Judge(current, memo=memo))
        self._routes: dict[str, MethodInfo | None] = {}
        #: Entries not replayed, by reason (``warden/<chain>`` entries that record no
        #: decision, ``<method>:not_recorded``, no request …).
        self.skipped: dict[str, int] = {}
        #: Seconds spent in :meth:`run`'s loop and the decisions it replayed.
        self.seconds = 0.0
        self.replayed = 0

    @property
    def evaluations(self) -> int:
        """Bundle evaluations actually run (memo misses and provenance steps)."""
        return sum(j.evaluations for j in {id(j): j for j in self._judges.values()}.values())

    def _judge_for(self, digest: str) -> _Judge | None:
        judge = self._judges.get(digest)
        return judge if judge is not None else self._current

    def _route(self, method: str) -> MethodInfo | None:
        if method not in self._routes:
            try:
                self._routes[method] = route(method)
            except WardenError:
                self._routes[method] = None
        return self._routes[method]

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def run(self, reader: LogReader, window: Window | None = None) -> Iterator[Replayed]:
        """Yield every admitted decision replayed, in log order."""
        window = window or Window()
        sessions = reader.sessions()
        fallback_agents = reader.agents()
        agents: dict[str, dict[str, Any]] = {}
        need_provenance = self.candidate.spec is not None or any(
            j.spec is not None for j in self._judges.values()
        )
        states: dict[str, SessionProvenance] = {}
        self._facts: dict[str, dict[str, Any]] = {}
        wires = WireSteps()
        bounded = window != Window()
        began = time.perf_counter()
        try:
            for logged in reader.entries():
                # orjson: parsing the leaves is most of a replay's cost (bench/whatif.py).
                entry: dict[str, Any] = (
                    _loads(logged.entry) if isinstance(logged.entry, str) else logged.entry
                )
                step_type = str(entry.get("step_type", ""))
                if step_type.startswith("warden/"):
                    wired = wires.step(step_type, entry)
                    if isinstance(wired, WireStep):
                        if not bounded or window.admits(
                            str(entry.get("timestamp", "")), wired.agent
                        ):
                            yield self._replay_wire(logged, entry, wired)
                        continue
                    if wired is not None:
                        self._skip(wired)
                        continue
                    if step_type == "warden/agents.registered":
                        detail = entry.get("agents") or {}
                        aid = str(detail.get("agent_id", ""))
                        agents[aid] = agent_facts(
                            aid,
                            str(detail.get("owner", "")),
                            detail.get("groups") or (),
                            detail.get("budgets") or (),
                        )
                    self._skip(step_type.split(".", 1)[0])
                    continue
                session = sessions.get(logged.session_id)
                info = self._route(step_type)
                if session is None or info is None:
                    self._skip("unroutable" if session is not None else "no_session")
                    continue
                verdict = entry.get("verdict") or {}
                admitted = not bounded or window.admits(
                    str(entry.get("timestamp", "")), session.agent_id
                )
                if not admitted and not need_provenance:
                    continue
                if logged.request is None:
                    if admitted:
                        self._skip("no_request")
                    continue
                params = _loads(logged.request)
                prior = states.get(logged.session_id) if need_provenance else None
                if need_provenance:
                    states[logged.session_id] = (prior or SessionProvenance()).applied(
                        step_type,
                        params,
                        str(verdict.get("decision", "")),
                        verdict.get("intent_extension"),
                    )
                    prior = prior or SessionProvenance()
                if not admitted:
                    continue
                yield self._replay(
                    logged, entry, session, info, params, prior, agents, fallback_agents
                )
        finally:
            self.seconds += time.perf_counter() - began

    def _replay(
        self,
        logged: Any,
        entry: dict[str, Any],
        session: LoggedSession,
        info: MethodInfo,
        params: dict[str, Any],
        prior: SessionProvenance | None,
        agents: dict[str, dict[str, Any]],
        fallback: dict[str, dict[str, Any]],
    ) -> Replayed:
        verdict = entry.get("verdict") or {}
        facts = self._facts.get(session.session_id)
        if facts is None:
            facts = _agent_of(session, agents, fallback)
            self._facts[session.session_id] = facts
        request = action_request(
            info,
            params,
            _Step(session.agent_id, logged.seq - 1),  # type: ignore[arg-type]
            agent=facts,
            claims={"user_id": user_id_claim(params.get("metadata"))},
        )
        return self._judged(
            logged,
            entry,
            verdict,
            request,
            prior,
            params,
            wire="mcp" if info.kind == "mcp" else "acs",
            tool=request.tool_name or info.method,
            agent=str(facts.get("id") or session.agent_id),
        )

    def _replay_wire(self, logged: Any, entry: dict[str, Any], step: WireStep) -> Replayed:
        """A Warden-chain wire's recorded decision (:mod:`warden.whatif.wires`): no
        provenance intake runs on these wires, so none is attached on replay either."""
        return self._judged(
            logged,
            entry,
            step.verdict,
            step.request,
            None,
            {},
            wire=step.wire,
            tool=step.request.tool_name or step.request.method,
            agent=step.agent,
        )

    def _judged(
        self,
        logged: Any,
        entry: dict[str, Any],
        verdict: dict[str, Any],
        request: ActionRequest,
        prior: SessionProvenance | None,
        params: dict[str, Any],
        *,
        wire: str,
        tool: str,
        agent: str,
    ) -> Replayed:
        """The recorded bundle and the candidate on one rebuilt request, compared."""
        recorded, mark = recorded_outcome(verdict)
        digest = str((verdict.get("bundle") or {}).get("digest", ""))
        judge = self._judge_for(digest)
        current = judge.decide(request, prior, params) if judge is not None else None
        faithful = None if current is None else reproduces(recorded, mark, current)
        if current is not None and (faithful or mark == "preempted"):
            old = current
        else:
            old = _policy_level(recorded, mark)
        new = (
            current
            if judge is self.candidate and current is not None
            else (self.candidate.decide(request, prior, params))
        )
        self.replayed += 1
        return Replayed(
            log_index=logged.log_index,
            session_id=logged.session_id,
            seq=logged.seq,
            step_id=str(entry.get("step_id", "")),
            timestamp=str(entry.get("timestamp", "")),
            wire=wire,
            tool=tool,
            agent=agent,
            recorded=recorded,
            mark=mark,
            recorded_digest=digest,
            current=current,
            faithful=faithful,
            old=old,
            new=new,
        )


class _Step:
    """What :func:`action_request` reads of a session (its agent and head before the
    step), without building a whole :class:`SessionState` per replayed step."""

    __slots__ = ("agent_id", "head_seq")

    def __init__(self, agent_id: str, head_seq: int) -> None:
        self.agent_id = agent_id
        self.head_seq = head_seq


def _agent_of(
    session: LoggedSession,
    agents: dict[str, dict[str, Any]],
    fallback: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The CEL ``agent`` of a session's verified signer: its registration as the log
    recorded it, else the registry's row, else what the session record names (id and
    owner); ``NO_AGENT`` for a session signed with the shared IKM."""
    identity = session.negotiated.get("identity") or {}
    if identity.get("scheme") != AGENT_KEY_SCHEME:
        return dict(NO_AGENT)
    aid = str(identity.get("agent_id") or session.agent_id)
    facts = agents.get(aid) or fallback.get(aid)
    if facts is None:
        facts = agent_facts(aid, str(identity.get("owner", "")))
    return facts


def _loads(text: str) -> Any:
    """Parse a stored JSON text: orjson (several times faster), else the standard parser
    for what orjson refuses (an integer beyond 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _policy_level(recorded: Outcome, mark: str | None) -> Outcome:
    """The best policy-level reading of a record when its bundle could not be re-run."""
    if mark == "budget":
        return Outcome("allow", recorded.rules)
    if mark == "human":
        return Outcome("ask", recorded.rules)
    return recorded


def load_bundles(
    sources: dict[str, str], on_error: Callable[[str, str], None]
) -> dict[str, Bundle]:
    """Parse stored bundle sources by digest; a source that no longer parses (a newer
    bundle format, say) is reported through ``on_error(digest, message)`` and left out."""
    from warden.policy.bundle import parse_bundle

    out: dict[str, Bundle] = {}
    for digest, source in sources.items():
        try:
            out[digest] = parse_bundle(source, source=f"<stored {digest[:19]}>")
        except WardenError as exc:
            on_error(digest, exc.message)
    return out
