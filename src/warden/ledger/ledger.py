"""The Ledger: chains entries, signs heads and sessions, commits them durably through the Store.

``stage`` computes the entry hash on the session's current head, lets the caller
build (and sign) the wire response that publishes it and signs a head
checkpoint; ``commit`` (or the group committer) writes all of it in one store
transaction. A response is released only after its commit: nothing is
acknowledged before its audit entry is durable.

Sessions are signed when created (:meth:`Ledger.create_session`, or any
``store.create_session`` once a Ledger is attached: it registers
:meth:`Ledger.signed_session` as the store's ``session_signer``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, SessionKeys, hmac_sign
from warden.crypto.jcs_fast import JcsRoute
from warden.ledger.chain import chain_entry
from warden.ledger.records import head_signing_input, session_signing_input
from warden.store.base import (
    FoldedWrite,
    PendingAppend,
    ReplayKeys,
    SessionState,
    Store,
    TaskUnchanged,
)

#: The largest integer every JCS peer reads exactly (RFC 8785 §3.2.2.3, I-JSON).
_MAX_SAFE_INT = 2**53 - 1

ResponseBuilder = Callable[[dict[str, Any]], dict[str, Any] | None]


def session_record(state: SessionState) -> dict[str, Any]:
    """The exported session record of ``state`` (without its signature).

    ``negotiated`` goes through a JSON round trip: it is signed exactly as the
    store will read it back.
    """
    return {
        "kind": "session",
        "session_id": state.session_id,
        "agent_id": state.agent_id,
        "key_id": state.key_id,
        "created_at": state.created_at,
        "negotiated": json.loads(json.dumps(state.negotiated, ensure_ascii=False)),
    }


class Ledger:
    """Appends chained, signed audit entries."""

    def __init__(self, store: Store, keys: SessionKeys, key_id: str) -> None:
        self.store = store
        self.keys = keys
        self.key_id = key_id
        if store.session_signer is None:
            # Every session the store creates from now on is signed, even by a
            # caller that calls ``store.create_session`` directly.
            store.session_signer = self.signed_session

    def _sign(
        self, session_id: str, record: dict[str, Any], *, known_fast: bool = False
    ) -> dict[str, Any]:
        value = hmac_sign(
            self.keys.key_for(session_id), canonical_bytes(record, known_fast=known_fast)
        )
        return {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": self.key_id}

    def signed_session(self, state: SessionState) -> dict[str, Any]:
        """The signature of the session record of ``state`` (under the session key)."""
        return self._sign(state.session_id, session_signing_input(session_record(state)))

    def create_session(
        self, state: SessionState, replay: ReplayKeys, *, agent_key: str | None = None
    ) -> SessionState:
        """Create the session, signed; return the state as stored (with its signature).
        ``agent_key``: the registered agent key that signed the handshake, checked
        unrevoked in the same transaction (``KeyRevoked``)."""
        signed = replace(state, signature=self.signed_session(state))
        self.store.create_session(signed, replay, agent_key=agent_key)
        return signed

    def signed_head(
        self, session_id: str, seq: int, chain_hash: str, *, closed: bool = False
    ) -> dict[str, Any]:
        """The signature of the head checkpoint record (under the session key)."""
        rec: dict[str, Any] = {
            "kind": "head",
            "session_id": session_id,
            "seq": seq,
            "chain_hash": chain_hash,
            "closed": closed,
        }
        # Four scalars whose exact types are checked here: when they hold, the sorted
        # encoder's output is the record's JCS (no walk; a lone surrogate in the id is
        # still refused by the encoder and decided by rfc8785, as after a walk).
        fast = (
            type(session_id) is str
            and type(chain_hash) is str
            and type(seq) is int
            and -_MAX_SAFE_INT <= seq <= _MAX_SAFE_INT
            and type(closed) is bool
        )
        return self._sign(session_id, head_signing_input(rec), known_fast=fast)

    def stage(
        self,
        session: SessionState,
        content: dict[str, Any],
        build_response: ResponseBuilder,
        *,
        replay: ReplayKeys | None,
        close: bool = False,
        request: str | None = None,
        indexed: Callable[[int], dict[str, Any]] | None = None,
        guards: tuple[TaskUnchanged, ...] = (),
        folded: FoldedWrite | None = None,
        agent_key: str | None = None,
        within: JcsRoute | None = None,
    ) -> PendingAppend:
        """Chain ``content`` after the session head; return what to commit.

        ``build_response(entry)`` receives the completed entry (with
        ``entry_hash``) and returns the signed response to store beside it.
        ``request``, if given, is the canonical JSON of the request's params: its
        SHA-256 must be ``content["request_hash"]`` (``ValueError`` otherwise).
        ``indexed(leaf_index)``, if given, returns the final signed response once the
        store knows the entry's transparency-log index, inside the commit's transaction
        (:attr:`PendingAppend.indexed`); ``build_response`` then only prepares it.
        ``guards``: rows read outside the transaction that the append must find unchanged
        (:class:`~warden.errors.StaleRead` otherwise); ``folded``: a gate's writes that
        commit in the append's transaction (:attr:`PendingAppend.folded`); ``agent_key``:
        the registered agent key that signed the step, checked unrevoked by the append;
        ``within``: the JCS route of ``content`` when the caller knows it
        (:func:`~warden.ledger.chain.compute_entry_hash`).
        Nothing is written until the :class:`PendingAppend` is committed
        (:meth:`commit`, or a group committer); only then may the response leave.
        """
        if request is not None and (
            hashlib.sha256(request.encode("utf-8")).hexdigest() != content.get("request_hash")
        ):
            raise ValueError("request does not hash to the entry's request_hash")
        entry = chain_entry(content, session.head_hash, within=within)
        response = build_response(entry)
        seq = session.head_seq + 1
        return PendingAppend(
            session_id=session.session_id,
            expected_seq=session.head_seq,
            entry=entry,
            response=response,
            head_signature=self.signed_head(
                session.session_id, seq, entry["entry_hash"], closed=session.closed or close
            ),
            replay=replay,
            close=close,
            request=request,
            indexed=indexed,
            guards=guards,
            folded=folded,
            agent_key=agent_key,
        )

    def commit(self, pending: PendingAppend) -> None:
        """Commit one staged append durably. Raises ``HeadMoved``/``ReplayDetected``/
        ``StoreUnavailable`` from the store, having written nothing."""
        (error,) = self.store.append_many([pending])
        if error is not None:
            raise error
