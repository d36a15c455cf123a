"""The Ledger: chains entries, signs heads and commits them durably through the Store.

``stage`` computes the entry hash on the session's current head, lets the caller
build (and sign) the wire response that publishes it and signs a head
checkpoint; ``commit`` (or the group committer) writes all of it in one store
transaction. A response is released only after its commit: nothing is
acknowledged before its audit entry is durable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, SessionKeys, hmac_sign
from warden.ledger.chain import chain_entry
from warden.ledger.records import head_signing_input
from warden.store.base import PendingAppend, ReplayKeys, SessionState, Store

ResponseBuilder = Callable[[dict[str, Any]], dict[str, Any] | None]


class Ledger:
    """Appends chained, signed audit entries."""

    def __init__(self, store: Store, keys: SessionKeys, key_id: str) -> None:
        self.store = store
        self.keys = keys
        self.key_id = key_id

    def signed_head(self, session_id: str, seq: int, chain_hash: str) -> dict[str, Any]:
        """The head checkpoint record, signed under the session key."""
        rec: dict[str, Any] = {
            "kind": "head",
            "session_id": session_id,
            "seq": seq,
            "chain_hash": chain_hash,
        }
        value = hmac_sign(self.keys.key_for(session_id), canonical_bytes(head_signing_input(rec)))
        return {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": self.key_id}

    def stage(
        self,
        session: SessionState,
        content: dict[str, Any],
        build_response: ResponseBuilder,
        *,
        replay: ReplayKeys | None,
        close: bool = False,
    ) -> PendingAppend:
        """Chain ``content`` after the session head; return what to commit.

        ``build_response(entry)`` receives the completed entry (with
        ``entry_hash``) and returns the signed response to store beside it.
        Nothing is written until the :class:`PendingAppend` is committed
        (:meth:`commit`, or a group committer); only then may the response leave.
        """
        entry = chain_entry(content, session.head_hash)
        response = build_response(entry)
        seq = session.head_seq + 1
        return PendingAppend(
            session_id=session.session_id,
            expected_seq=session.head_seq,
            entry=entry,
            response=response,
            head_signature=self.signed_head(session.session_id, seq, entry["entry_hash"]),
            replay=replay,
            close=close,
        )

    def commit(self, pending: PendingAppend) -> None:
        """Commit one staged append durably. Raises ``HeadMoved``/``ReplayDetected``/
        ``StoreUnavailable`` from the store, having written nothing."""
        (error,) = self.store.append_many([pending])
        if error is not None:
            raise error
