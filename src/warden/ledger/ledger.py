"""The Ledger: chains entries, signs heads and appends durably through the Store.

``append`` computes the entry hash on the session's current head, lets the
caller build (and sign) the wire response that publishes it, signs a head
checkpoint, and commits all of it in one store transaction. It returns only
after the commit: nothing is acknowledged before its audit entry is durable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, SessionKeys, hmac_sign
from warden.ledger.chain import chain_entry
from warden.ledger.records import head_signing_input
from warden.store.base import ReplayKeys, SessionState, Store

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

    def append(
        self,
        session: SessionState,
        content: dict[str, Any],
        build_response: ResponseBuilder,
        *,
        replay: ReplayKeys | None,
        close: bool = False,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Chain ``content`` after the session head and commit it durably.

        ``build_response(entry)`` receives the completed entry (with
        ``entry_hash``) and returns the signed response to store beside it.
        Returns ``(entry, response)``. Raises ``HeadMoved``/``ReplayDetected``/
        ``StoreUnavailable`` from the store, having written nothing.
        """
        entry = chain_entry(content, session.head_hash)
        response = build_response(entry)
        seq = session.head_seq + 1
        self.store.append(
            session.session_id,
            expected_seq=session.head_seq,
            entry=entry,
            response=response,
            head_signature=self.signed_head(session.session_id, seq, entry["entry_hash"]),
            replay=replay,
            close=close,
        )
        return entry, response
