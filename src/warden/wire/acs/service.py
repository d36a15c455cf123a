"""The ACS protocol core: request bytes in, response envelope out (transport-independent).

Dispatch order (specs/acs.md §17, REF-PY, asserted by the black-box probes):

1. body cap, strict JSON (-32700, id null); batch → -32600
2. request-envelope.json (-32600, unsigned); JCS domain (-32600)
3. ``system/ping`` → allow (never chained; signed only if the request was)
4. the key named by ``key_id`` (a registered agent's, or the shared IKM's only with
   ``--unsafe-shared-ikm``), HKDF session key, HMAC verify (-32004, unsigned); or, for
   an agent's registered public key (ACS-Crypto, issue 21), the signature under it with
   its own algorithm
   — from here every answer is signed: HMAC, or Warden's ML-DSA-65 key for an
   ACS-Crypto caller —
5. ``handshake/hello`` → ServerHello (or -32001/-32000/-32002; -32004 when the claimed
   ``agent_id`` is not the key's registered agent)
6. route (-32601; agbom/* → -32003); session lookup (-32003; another agent's reads as missing)
7. replay: request_id, then nonce (-32005); recorded on arrival, persisted
8. an HMAC request in an ACS-Crypto session → -32004 ``downgrade_refused`` (signed with
   Warden's ML-DSA key); key_id / agent_id binding, closed session → signed DENY
   without an entry
9. negotiated method (-32003), skew window (-32006), payload schema (-32602)
10. client chain_hash cross-check → DENY ``chain_mismatch``; else Guardian.decide;
    then the spend gate (:mod:`warden.gates.spend`): a priced allow/modify tool call
    holds its cost or becomes a DENY ``budget_exceeded``, a tool result settles or
    releases its request's hold (store work yielded as :class:`Offload`)
11. ContextEntry appended and committed; response with ``chain_hash``, signed; if the
    commit fails, a hold taken for it is released. The commit re-checks in its own
    transaction that the agent key is unrevoked: a key revoked on any replica is
    answered -32004, unsigned, from the next request on

Once authenticated, a failure to decide or to store is a signed DENY, never a
silent allow and never an unsigned error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from warden.core.flow import SessionLock, SessionLocks, drive, drive_async
from warden.core.guardian import Guardian
from warden.core.observe import Wire
from warden.core.pipeline import Decided, Gate, Offload, Pipeline, abandon
from warden.core.types import ActionRequest, Effect, Verdict, user_id_claim
from warden.crypto.canonical import (
    MAX_REQUEST_DEPTH,
    canonical_bytes,
    jcs_domain_error,
    lone_surrogate_at,
    may_hold_surrogates,
    parse_strict_json,
    sha256_hex,
)
from warden.crypto.hmac_keys import SessionKeys
from warden.crypto.jcs_fast import JcsRoute, jcs_route, jcs_writable, parts_route
from warden.errors import (
    CapabilityNotNegotiated,
    DowngradeRefused,
    HeadMoved,
    InvalidParams,
    InvalidRequest,
    KeyRevoked,
    ParseError,
    ProtocolError,
    SessionRefused,
    SignatureInvalid,
    StaleRead,
    StoreUnavailable,
    TimestampOutOfWindow,
    UnsupportedVersion,
    WardenError,
    failure_log_level,
)
from warden.gates.approval import ApprovalGate, ApprovalStep
from warden.gates.spend import SpendGate, SpendStep
from warden.ids import uuid4_text
from warden.ledger.ledger import Ledger
from warden.provenance.facts import view_for
from warden.provenance.graph import SessionProvenance
from warden.provenance.tracker import DEFAULT_CACHE_BYTES, ProvenanceTracker
from warden.schemas import schema_set
from warden.store.base import PendingAppend, ReplayKeys, SessionState, Store
from warden.store.group_commit import GroupCommitter
from warden.wire.acs.callers import Caller, CallerKeys, request_key_id
from warden.wire.acs.handshake import SUPPORTED_VERSIONS, HandshakeConfig, negotiate
from warden.wire.acs.mcp import check_wrapped
from warden.wire.acs.methods import HANDSHAKE, PING, MethodInfo, is_negotiated, route
from warden.wire.acs.parse import action_request
from warden.wire.acs.render import entry_content, error_response, jsonrpc_id, verdict_result
from warden.wire.acs.signing import (
    ResponseSigner,
    sign_response,
    sign_response_with,
    verify_request,
    verify_request_asymmetric,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
_PLACEHOLDER_HASH = "0" * 64
_APPEND_ATTEMPTS = 5

_FAILURE_TEXT = {
    "store_unavailable": "Warden could not record this step durably, so it is denied "
    "(fail closed).",
    "head_moved": "Warden could not record this step durably, so it is denied (fail closed).",
    "evaluation_failed": "Warden could not evaluate this step, so it is denied (fail closed).",
}


#: The dispatch generator: yields a session lock, appends to commit and work to offload;
#: receives each outcome (None or an append's error, the work's value); returns the response.
Flow = Generator[SessionLock | PendingAppend | Offload, Any, dict[str, Any]]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _parse_ts(value: str) -> datetime:
    """An RFC 3339 timestamp (``t``/``z`` in any case) as an aware datetime; raises
    :class:`InvalidRequest` for one Python cannot represent (year 0000, second 60)."""
    try:
        ts = datetime.fromisoformat(value.upper())
    except ValueError as exc:
        raise InvalidRequest(
            f"timestamp {value!r} cannot be interpreted as a point in time", reason="bad_timestamp"
        ) from exc
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


class AcsService:
    """Serves ACS JSON-RPC requests for one Guardian, store and key set. Thread-safe."""

    def __init__(
        self,
        guardian: Guardian,
        store: Store,
        keys: SessionKeys,
        *,
        key_id: str = "warden",
        handshake: HandshakeConfig | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        provenance_cache_bytes: int = DEFAULT_CACHE_BYTES,
        clock: Any = _utcnow,
        spend_gate: SpendGate | None = None,
        approval_gate: ApprovalGate | None = None,
        callers: CallerKeys | None = None,
        response_signer: ResponseSigner | None = None,
    ) -> None:
        self.guardian = guardian
        self.spend_gate = spend_gate
        self.approval_gate = approval_gate
        self.store = store
        self.keys = keys
        # Without a registry every caller signs with the shared IKM (library use).
        self.callers = callers or CallerKeys(None, keys, unsafe_shared_ikm=True)
        self.key_id = key_id
        #: Warden's ML-DSA-65 key: answers ACS-Crypto sessions (None: not offered).
        self.response_signer = response_signer
        self.cfg = handshake or HandshakeConfig()
        if response_signer is None and self.cfg.crypto_algorithms:
            self.cfg = replace(self.cfg, crypto_algorithms=())
        self.max_body_bytes = max_body_bytes
        self.schemas = schema_set("acs")
        self.ledger = Ledger(store, keys, key_id)
        self.pipeline = Pipeline(guardian)
        self.provenance = ProvenanceTracker(store, provenance_cache_bytes)
        self._clock = clock
        self._locks = SessionLocks()
        # Compile every validator now: a missing schema stops start-up, not a request.
        self.schemas.validator("request-envelope.json")
        self.schemas.validator("response-envelope.json")
        self.schemas.validator("handshake.json", fragment="#/$defs/ClientHello")
        self.schemas.validator("hooks/system-ping.json")
        from warden.wire.acs.methods import HOOKS

        for path, _ in HOOKS.values():
            self.schemas.validator(path)

    # -- entry point -------------------------------------------------------------

    def handle(self, body: bytes) -> dict[str, Any]:
        """Answer one request body with one response envelope. Never raises.

        Commits each audit entry on its own before answering. Thread-safe: steps
        of one session are serialised by a lock stripe.
        """
        try:
            return drive(self._flow(body), lock_for=self._locks.thread, commit=self.ledger.commit)
        except Exception:  # noqa: BLE001 - outermost layer: an internal error, unsigned
            log.exception("internal error while handling an ACS request")
            return error_response(None, _internal())

    async def handle_async(self, body: bytes, committer: GroupCommitter) -> dict[str, Any]:
        """:meth:`handle` for an event loop: audit entries of concurrent requests are
        committed together by ``committer`` (group commit); each response is
        returned only after its own entry is durable. Never raises."""
        try:
            return await drive_async(
                self._flow(body), lock_for=self._locks.loop, commit=committer.commit
            )
        except Exception:  # noqa: BLE001 - outermost layer: an internal error, unsigned
            log.exception("internal error while handling an ACS request")
            return error_response(None, _internal())

    def _flow(self, body: bytes) -> Flow:
        """The whole dispatch as a generator: it yields each audit entry to commit and
        receives the commit's outcome (None or the error); it returns the response."""
        if len(body) > self.max_body_bytes:
            return error_response(
                None,
                InvalidRequest(
                    f"request body exceeds {self.max_body_bytes} bytes", reason="body_too_large"
                ),
            )
        try:
            msg = parse_strict_json(body, max_depth=MAX_REQUEST_DEPTH)
        except ParseError as exc:
            return error_response(None, exc)
        if isinstance(msg, list):
            return error_response(
                None,
                InvalidRequest(
                    "batch requests are not supported by this Guardian", reason="batch_unsupported"
                ),
            )
        rid = jsonrpc_id(msg)
        if may_hold_surrogates(body):
            # Before the schema: its validator cannot take such strings (it raised, -32603).
            at = lone_surrogate_at(msg)
            if at is not None:
                return error_response(
                    rid,
                    InvalidRequest(
                        f"value is outside the RFC 8785 (JCS) domain: the string at {at} "
                        "holds a lone surrogate escape (\\uD800–\\uDFFF without its pair)",
                        reason="jcs_domain",
                        pointer=at,
                    ),
                )
        problem = self.schemas.first_error("request-envelope.json", _with_key_id(msg))
        if problem is not None:
            pointer, text = problem
            return error_response(
                rid,
                InvalidRequest(
                    f"request envelope invalid at {pointer or '/'}: {text}", pointer=pointer
                ),
            )
        # One walk checks the JCS domain and finds how the fast path writes this
        # envelope (floats included); every canonicalization of it below reuses that
        # route instead of walking again. Only a value the walk is unsure of (NaN, an
        # integer beyond 2^53, ...) is canonicalized here, to refuse it first. Integral
        # floats (2500.0) are made ints once, in a copy only signed and hashed.
        jcs = jcs_route(msg)
        if jcs is JcsRoute.UNSURE:
            try:
                canonical_bytes(msg)  # raises for values outside the JCS domain
            except InvalidRequest as exc:
                return error_response(rid, jcs_domain_error(exc, msg))
        jcs_msg, jcs = jcs_writable(msg, jcs)
        params = msg["params"]
        method = msg["method"]
        sid = params["metadata"]["session_id"]
        key_id = request_key_id(params)
        caller = self.callers.resolve(key_id, sid) if key_id is not None else None
        authentic = False
        if caller is not None and caller.crypto and self.response_signer is None:
            caller = None  # nothing to answer an ACS-Crypto caller with: not offered
        if caller is not None:
            try:
                if caller.public_key is not None:
                    authentic = verify_request_asymmetric(
                        jcs_msg, caller.algorithm, caller.public_key, within=jcs
                    )
                else:
                    authentic = verify_request(jcs_msg, caller.key, within=jcs)
            except InvalidRequest as exc:  # a lone surrogate passes jcs_route's walk
                return error_response(rid, exc)
        if method == PING:
            return self._ping(msg, caller if authentic else None)
        if caller is None and key_id and (agents := self.callers.registry) is not None:  # noqa: SIM102
            if agents.revoked_signer(key_id, sid, partial(verify_request, jcs_msg, within=jcs)):
                return error_response(rid, KeyRevoked(f"agent key {key_id} is revoked"))  # 1039
        if not authentic or caller is None:
            return error_response(
                rid,
                SignatureInvalid(
                    "request signature is missing or does not verify: sign with a registered "
                    "agent's key (HMAC-SHA256 over the JCS envelope without params.signature, "
                    "key = HKDF(agent IKM, session_id), or under ACS-Crypto the algorithm of "
                    "the agent's registered public key) and name it in signature.key_id"
                ),
            )
        try:
            if method == HANDSHAKE:
                return self._sign(caller, self._handshake(msg, caller))
            info = route(method)
            # The params exactly as hashed into request_hash (and stored beside the entry).
            received = canonical_bytes(jcs_msg["params"], within=jcs)
            return (yield from self._step(msg, info, caller, received))
        except KeyRevoked as exc:
            # Revoked on some replica since this one cached the key: unauthenticated.
            self.callers.forget(caller.key_id)
            return error_response(rid, exc)
        except DowngradeRefused as exc:
            # Answered as the ACS-Crypto session it is: with Warden's key, never HMAC.
            return self._sign(caller, error_response(rid, exc), crypto=True)
        except ProtocolError as exc:
            return self._sign(caller, error_response(rid, exc))
        except WardenError as exc:
            # The operator gets the detail; the wire gets a fixed sentence (STYLE.md 4).
            log.log(failure_log_level(exc), "signed deny after failure: %s", exc.diagnostics())
            reason = exc.reason if exc.reason in _FAILURE_TEXT else "evaluation_failed"
            if method == HANDSHAKE:
                return self._sign(
                    caller,
                    error_response(rid, SessionRefused(_FAILURE_TEXT[reason], reason=reason)),
                )
            return self._sign(
                caller, self._bare_deny(msg, reason, _FAILURE_TEXT[reason], caller.shared)
            )

    # -- pieces ------------------------------------------------------------------

    def _sign(
        self, caller: Caller, response: dict[str, Any], *, crypto: bool = False, within: Any = None
    ) -> dict[str, Any]:
        """``response`` signed for ``caller``: HMAC with its session key (``within``: its
        ``JcsRoute``), or (ACS-Crypto, or ``crypto``) with Warden's asymmetric key."""
        if caller.crypto or crypto:
            assert self.response_signer is not None
            return sign_response_with(response, self.response_signer)
        return sign_response(response, caller.key, self.key_id, within=within)

    def _bare_deny(
        self, msg: dict[str, Any], reason: str, text: str, shared: bool = False
    ) -> dict[str, Any]:
        """A signed DENY for a step that wrote no entry (no chain_hash)."""
        verdict = Verdict(decision=Effect.DENY, reasoning=text, reason_codes=(reason,))
        if shared:
            verdict = _mark_shared(verdict)
        return {
            "jsonrpc": "2.0",
            "id": msg["id"],
            "result": verdict_result(
                verdict,
                acs_version=SUPPORTED_VERSIONS[0],
                request_id=msg["params"]["request_id"],
                chain_hash=None,
                duration_ms=0,
            ),
        }

    def _ping(self, msg: dict[str, Any], caller: Caller | None) -> dict[str, Any]:
        params = msg["params"]
        problem = self.schemas.first_error("hooks/system-ping.json", params["payload"])
        if problem is not None:
            # A malformed ping gets a plain JSON-RPC error, never an ACS one (§13);
            # signed when the ping was (an authenticated request gets a signed answer).
            error = error_response(
                msg["id"],
                InvalidParams(
                    f"ping payload invalid at {problem[0] or '/'}: {problem[1]}",
                    pointer="/params/payload" + problem[0],
                    method=PING,
                ),
            )
            return self._sign(caller, error) if caller is not None else error
        payload: dict[str, Any] = {"status": "ok", "server_timestamp": self._clock().isoformat()}
        if "echo" in params["payload"]:
            payload["echo"] = params["payload"]["echo"]
        response = {
            "jsonrpc": "2.0",
            "id": msg["id"],
            "result": {
                "type": "final",
                "acs_version": SUPPORTED_VERSIONS[0],
                "request_id": params["request_id"],
                "decision": "allow",
                "payload": payload,
            },
        }
        return self._sign(caller, response) if caller is not None else response

    def _check_skew(self, params: dict[str, Any]) -> None:
        skew_ms = abs((self._clock() - _parse_ts(params["timestamp"])).total_seconds()) * 1000
        if skew_ms > self.cfg.skew_window_ms:
            raise TimestampOutOfWindow(
                f"timestamp is {int(skew_ms)} ms from the Guardian's clock "
                f"(window {self.cfg.skew_window_ms} ms)",
                skew_window_ms=self.cfg.skew_window_ms,
            )

    def _handshake(self, msg: dict[str, Any], caller: Caller) -> dict[str, Any]:
        params = msg["params"]
        sid = params["metadata"]["session_id"]
        if caller.agent is not None and params["metadata"]["agent_id"] != caller.agent.agent_id:
            # The key is the agent's identity; a claim of another id opens nothing.
            raise SignatureInvalid(
                "metadata.agent_id is not the agent this key is registered to",
                reason="agent_id_not_bound",
            )
        replay = ReplayKeys(params["request_id"], params.get("nonce"))
        existing = self.store.load_session(sid)
        if existing is not None:
            self.store.record_replay(sid, replay)  # raises ReplayDetected on a replay
            raise SessionRefused(
                "this session has already negotiated; renegotiation is not supported in ACS v0.1",
                reason="renegotiation_not_supported",
            )
        problem = self.schemas.first_error(
            "handshake.json", params["payload"], fragment="#/$defs/ClientHello"
        )
        if problem is not None:
            raise InvalidParams(
                f"ClientHello invalid at {problem[0] or '/'}: {problem[1]}",
                pointer="/params/payload" + problem[0],
                method=HANDSHAKE,
            )
        self._check_skew(params)
        hello = negotiate(params["payload"], self.cfg, crypto=caller.crypto)
        crypto: dict[str, Any] = {}
        if caller.crypto:
            assert self.response_signer is not None
            crypto["crypto"] = {
                "request_algorithm": caller.algorithm,
                "response_algorithm": self.response_signer.algorithm,
                "response_key_id": self.response_signer.kid,
            }
        self.ledger.create_session(
            SessionState(
                session_id=sid,
                agent_id=params["metadata"]["agent_id"],
                key_id=caller.key_id,
                created_at=self._clock().isoformat(),
                negotiated={
                    "server_hello": hello,
                    "provenance_producer": params["payload"]["provenance_producer"],
                    "identity": caller.identity_record(),
                    **crypto,
                },
            ),
            replay,
            agent_key=caller.agent_key,
        )
        return {"jsonrpc": "2.0", "id": msg["id"], "result": hello}

    def _step(self, msg: dict[str, Any], info: MethodInfo, caller: Caller, received: bytes) -> Flow:
        """A signed response for a routed step (protocol errors are raised).

        Optimistic: the entry is chained on the head as last seen; if another
        request moved the head first, the commit fails with ``HeadMoved`` and the
        step is decided again on the fresh head.
        """
        started = time.perf_counter()
        wire: Wire = "mcp" if info.kind == "mcp" else "acs"
        params = msg["params"]
        sid = params["metadata"]["session_id"]
        replay = ReplayKeys(params["request_id"], params.get("nonce"))
        yield SessionLock(sid)
        gate = (
            self.spend_gate.step(
                sid, params["request_id"], is_replay=lambda: self.store.seen(sid, replay)
            )
            if self.spend_gate is not None
            else None
        )
        approval = (
            self.approval_gate.step(params["request_id"])
            if self.approval_gate is not None
            else None
        )
        stale_read = False
        for attempt in range(_APPEND_ATTEMPTS):
            # A failed read guard moved no head (nothing was written): the session as
            # this replica knows it is as good as on the first attempt, and the append
            # checks its head anyway (decision 703). A moved head is read again.
            session = self.store.load_session(sid, fresh=attempt > 0 and not stale_read)
            if session is None or not caller.may_see(session.agent_id):
                raise CapabilityNotNegotiated(
                    "no handshake/hello for this session", method=msg["method"]
                )
            refusal = self._refusal(msg, info, session, caller)
            if refusal is not None:
                # Recorded on arrival: raises ReplayDetected first if this is a replay.
                self.store.record_replay(sid, replay)
                if isinstance(refusal, ProtocolError):
                    raise refusal
                self.pipeline.finished_raw(wire, refusal["result"], started)
                return self._sign(caller, refusal)
            spec = self.guardian.engine.bundle.provenance
            if spec is not None:
                # Reused provenance ids and steps over the bundle's graph limits are bad
                # input: -32602, nothing recorded in the chain.
                prior = yield Offload(partial(self.provenance.state, session))
                taken = yield Offload(partial(prior.check, msg["method"], params, spec))
                if taken.problem is not None:
                    self.store.record_replay(sid, replay)
                    raise InvalidParams(
                        f"{msg['method']} provenance refused: {taken.problem[1]}",
                        pointer=taken.problem[0],
                        method=msg["method"],
                    )
            after: list[SessionProvenance] = []
            seen: list[Decided] = []
            pending = yield from self._decide(
                msg, info, session, replay, caller, received, gate, approval, after, seen
            )
            # The commit's unique replay keys detect a replay (-32005) atomically.
            outcome = yield pending
            if outcome is None:
                assert pending.response is not None
                # Final only now: after both gates and the durable commit.
                self.pipeline.finished_raw(
                    wire,
                    pending.entry.get("verdict", {}),
                    started,
                    decided=seen[-1],
                    audit={
                        "session_id": sid,
                        "entry_hash": pending.entry["entry_hash"],
                        "sequence": pending.expected_seq + 1,
                    },
                )
                if after:
                    self.provenance.committed(sid, pending.entry["entry_hash"], after[0])
                return pending.response
            stale_read = isinstance(outcome, StaleRead)
            if stale_read and approval is not None:
                # The pending task the answer was read from changed: ask the desk again.
                approval.forget(outcome)
            if gate is not None and gate.held is not None:
                # The entry recording the hold did not commit: release it.
                yield Offload(gate.abandon)
            if not isinstance(outcome, HeadMoved):
                # The step a grant allowed was not recorded: give the grant back.
                yield from abandon(
                    [g for g in (approval,) if g is not None], "the step could not be recorded"
                )
                raise outcome
        raise StoreUnavailable("the session head kept moving; try again")

    def _refusal(
        self, msg: dict[str, Any], info: MethodInfo, session: SessionState, caller: Caller
    ) -> dict[str, Any] | ProtocolError | None:
        """Checks after replay: a signed deny (no entry), a protocol error, or None."""
        params = msg["params"]
        shared = caller.shared
        if session.negotiated.get("crypto") and not caller.crypto:
            # An ACS-Crypto session never falls back to HMAC (issue 21).
            return DowngradeRefused(
                "this session was negotiated as ACS-Crypto: requests are signed with the "
                "agent's registered public key, never HMAC",
                reason="downgrade_refused",
            )
        if caller.key_id != session.key_id:
            return self._bare_deny(
                msg,
                "key_not_bound",
                "The request's key_id is not the one bound at handshake.",
                shared,
            )
        if params["metadata"]["agent_id"] != session.agent_id or (
            caller.agent is not None and caller.agent.agent_id != session.agent_id
        ):
            return self._bare_deny(
                msg,
                "agent_id_not_bound",
                "The request's agent_id is not the one bound at handshake.",
                shared,
            )
        if session.closed:
            return self._bare_deny(msg, "session_closed", "This session has ended.", shared)
        evaluated = session.negotiated.get("server_hello", {}).get("methods_evaluated", [])
        if not is_negotiated(msg["method"], info, evaluated):
            return CapabilityNotNegotiated(
                f"method {msg['method']} was not negotiated for this session", method=msg["method"]
            )
        negotiated = session.negotiated.get("server_hello", {}).get("negotiated_version", "")
        if params["acs_version"].split(".")[0] != str(negotiated).split(".")[0]:
            return UnsupportedVersion(
                f"acs_version {params['acs_version']} does not match the negotiated {negotiated}",
                supported_versions=list(SUPPORTED_VERSIONS),
            )
        try:
            self._check_skew(params)
        except ProtocolError as exc:
            return exc
        payload = params["payload"]
        if info.kind == "hook":
            assert info.schema is not None
            problem = self.schemas.first_error(info.schema, payload)
            if problem is not None:
                return InvalidParams(
                    f"{msg['method']} payload invalid at {problem[0] or '/'}: {problem[1]}",
                    pointer="/params/payload" + problem[0],
                    method=msg["method"],
                )
        else:
            assert info.mcp_method is not None
            try:
                check_wrapped(payload, info.mcp_method, msg["method"])
            except InvalidParams as exc:
                return exc
        return None

    def _decide(
        self,
        msg: dict[str, Any],
        info: MethodInfo,
        session: SessionState,
        replay: ReplayKeys,
        caller: Caller,
        received: bytes,
        gate: SpendStep | None = None,
        approval: ApprovalStep | None = None,
        after: list[SessionProvenance] | None = None,
        seen: list[Decided] | None = None,
    ) -> Generator[Offload, Any, PendingAppend]:
        """Decide the step through the one pipeline (:mod:`warden.core.pipeline`: the
        verified caller, the Guardian, the approval gate, then the spend gate) and stage
        its entry. With a bundle ``provenance`` section the request carries the step's
        provenance view, and ``after`` receives the session's provenance state after it;
        ``seen`` receives the pipeline's :class:`Decided` (its request and stage timings
        for the decision's span)."""
        started = time.perf_counter()
        params = msg["params"]
        principal = caller.principal()
        request = action_request(
            info,
            params,
            session,
            agent=principal.agent,
            claims={"user_id": user_id_claim(params["metadata"])},
        )
        spec = self.guardian.engine.bundle.provenance
        intake = (
            _ProvenanceIntake(self.provenance, session, spec, params) if spec is not None else None
        )
        claimed = (params["metadata"].get("session_state") or {}).get("chain_hash")
        preempt = None
        if claimed is not None and claimed != (session.head_hash or ""):
            preempt = Verdict(
                decision=Effect.DENY,
                reasoning="The client's chain_hash does not match the Guardian's chain head.",
                reason_codes=("chain_mismatch",),
                bundle=self.guardian.engine.bundle.ref,
                policy_data={"chain": {"guardian_head": session.head_hash, "client": claimed}},
            )
        # Approval first (a grant rewrites an ask), then spend: a priced allow/modify
        # holds its cost or becomes a deny; a tool result settles or releases its hold.
        gates: list[Gate] = [g for g in (approval, gate) if g is not None]
        decided = yield from self.pipeline.decide(
            principal, request, intake=intake, gates=gates, preempt=preempt
        )
        if seen is not None:
            seen.append(decided)
        request, verdict = decided.request, decided.verdict
        if caller.shared:
            verdict = _mark_shared(verdict)
        acs_version = session.negotiated.get("server_hello", {}).get(
            "negotiated_version", SUPPORTED_VERSIONS[0]
        )

        def render(v: Verdict) -> dict[str, Any]:
            return {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": verdict_result(
                    v,
                    acs_version=acs_version,
                    request_id=params["request_id"],
                    chain_hash=_PLACEHOLDER_HASH,
                    duration_ms=int((time.perf_counter() - started) * 1000),
                ),
            }

        # Rendered once, checked before anything is written: an unfit response becomes
        # a deny; the entry's hash is set into this same document once it is chained.
        response = render(verdict)
        problem = self.schemas.first_error("response-envelope.json", response)
        if problem is not None:
            decided = yield from self.pipeline.fail_closed(
                decided,
                gates,
                f"rendered response failed its schema at {problem[0]}: {problem[1]}",
            )
            verdict = decided.verdict
            if gate is not None:
                # A deny holds nothing; a settlement already made stays recorded.
                verdict = replace(verdict, spend=gate.result_record)
            response = render(verdict)
        if intake is not None and intake.prior is not None:
            ibac = verdict.policy_data.get("ibac")
            if (
                approval is not None
                and approval.granted
                and verdict.decision in (Effect.ALLOW, Effect.MODIFY)
                and isinstance(ibac, dict)
            ):
                # A human approved a call outside the intent: an intent_extension (§8.4).
                verdict = replace(verdict, intent_extension=ibac.get("requested_capability"))
            state = intake.prior.applied(
                request.method, params, verdict.decision.value, verdict.intent_extension
            )
            verdict = replace(verdict, provenance_summary=state.summary())
            if after is not None:
                after.append(state)
        # The JCS route of the entry and response, unwalked: the verdict, scalars (947).
        head = (msg["id"], acs_version, session.session_id, request.method, params["timestamp"])
        route = verdict.jcs_route(*head, params["request_id"], params["metadata"].get("turn_id"))
        # The params exactly as hashed (canonicalized once, on arrival) are stored beside
        # the entry, so an auditor can re-check the decision from the record alone.
        content = entry_content(
            entry_id=uuid4_text(),
            session_id=session.session_id,
            request=request,
            params=params,
            request_hash=sha256_hex(received),
            verdict=verdict,
        )

        def chained(entry: dict[str, Any]) -> dict[str, Any]:
            response["result"]["chain_hash"] = entry["entry_hash"]
            return response

        def indexed(leaf_index: int) -> dict[str, Any]:
            # Signed inside the commit's transaction, once the entry's leaf index in the
            # transparency log is known: the client can ask for its inclusion proof.
            # The staged response (``pending.response``) becomes the signed one in place.
            result = response["result"]
            result["policy_data"] = {**result.get("policy_data", {}), "log_index": leaf_index}
            within = max(route, parts_route(leaf_index))
            response["result"] = self._sign(caller, response, within=within)["result"]
            return response

        try:
            return self.ledger.stage(
                session,
                content,
                chained,
                replay=replay,
                close=info.method == "steps/sessionEnd",
                request=received.decode(),
                indexed=indexed,
                within=route,
                guards=approval.guards if approval is not None else (),
                folded=approval.folded if approval is not None else None,
                agent_key=caller.agent_key,
            )
        except BaseException:
            if gate is not None:
                gate.abandon()
            raise


class _ProvenanceIntake:
    """ACS provenance intake: the session's provenance state before the step (kept in
    ``prior`` for the state after it) and the step's view for the rules and gates."""

    def __init__(
        self, tracker: ProvenanceTracker, session: SessionState, spec: Any, params: Any
    ) -> None:
        self.tracker = tracker
        self.session = session
        self.spec = spec
        self.params = params
        self.prior: SessionProvenance | None = None

    def attach(self, request: ActionRequest) -> ActionRequest:
        self.prior = self.tracker.state(self.session)
        return replace(
            request,
            provenance=view_for(
                self.prior, self.spec, request.method, self.params, request.args, request.tool
            ),
        )


def _mark_shared(verdict: Verdict) -> Verdict:
    """``verdict`` marked as signed for a caller authenticated by the shared master IKM
    only (``--unsafe-shared-ikm``): nothing about its identity was verified."""
    return replace(verdict, policy_data={**verdict.policy_data, "unsafe_shared_ikm": True})


def _with_key_id(msg: Any) -> Any:
    """``msg`` as the request schema should see it: a v0.1 bare signature
    ``{algorithm, value}`` whose key is named in ``metadata.key_id`` gets that
    ``key_id`` (the shipped v0.1.3 schema requires it in the signature object)."""
    params = msg.get("params") if isinstance(msg, dict) else None
    if not isinstance(params, dict):
        return msg
    sig, meta = params.get("signature"), params.get("metadata")
    key_id = meta.get("key_id") if isinstance(meta, dict) else None
    if isinstance(sig, dict) and "key_id" not in sig and isinstance(key_id, str):
        return {**msg, "params": {**params, "signature": {**sig, "key_id": key_id}}}
    return msg


def _internal() -> ProtocolError:
    from warden.errors import AcsErrorCode

    err = ProtocolError("internal error", reason="internal_error")
    err.code = AcsErrorCode.INTERNAL_ERROR
    return err
