"""Export audit chains as JSONL records closed by a signed manifest (see records.py).

The records are the store's own (:meth:`~warden.store.base.Store.iter_records`), which
refuses with :class:`~warden.errors.IntegrityError` what it cannot export faithfully
(stored JSON that is not strict, columns that disagree with their entry, entries of no
session): an export never silently drops or re-reads tampered rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.hmac_keys import HMAC_ALGORITHM, derive_session_key, hmac_sign
from warden.ledger.records import MANIFEST_KEY_INFO, manifest_signing_input
from warden.store.base import Store


def export_records(
    store: Store,
    ikm: bytes,
    *,
    key_id: str = "warden",
    session_id: str | None = None,
    log_record: Callable[[], dict[str, Any] | None] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield every record of the store (or one session), then ``log_record()`` (the
    transparency log's checkpoint and proof material, :mod:`warden.tlog.export`) if
    given and not None, then the signed manifest listing each exported session's head."""
    heads: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}
    for rec in store.iter_records(session_id):
        if rec["kind"] == "session":
            last[rec["session_id"]] = {
                "session_id": rec["session_id"],
                "seq": -1,
                "chain_hash": None,
            }
            heads.append(last[rec["session_id"]])
        elif rec["kind"] == "head":
            last[rec["session_id"]].update(seq=rec["seq"], chain_hash=rec["chain_hash"])
        yield rec
    if log_record is not None:
        extra = log_record()
        if extra is not None:
            yield extra
    manifest: dict[str, Any] = {"kind": "manifest", "sessions": heads}
    value = hmac_sign(
        derive_session_key(ikm, MANIFEST_KEY_INFO),
        canonical_bytes(manifest_signing_input(manifest)),
    )
    manifest["signature"] = {"algorithm": HMAC_ALGORITHM, "value": value, "key_id": key_id}
    yield manifest
