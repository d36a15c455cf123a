"""SQL for KLA records: :class:`SqlKlaRecords` on the ``kla_records`` table (migration
0005), inside the caller's open write transaction.

A row is one record (action request, policy decision, approval event or audit event)
as its RFC 8785 canonical JSON text beside the columns that are queried: its id, kind,
the action request and execution it belongs to, the submitting principal, its digest,
its detached signature and key id, and its status. Meaning (digests, signatures,
scoping) is given by :mod:`warden.wire.kla`; this module only reads and writes rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warden.crypto.canonical import canonical_bytes, parse_strict_json
from warden.errors import IntegrityError, IntegrityReason, WardenError

_COLUMNS = (
    "record_id, kind, action_request_id, execution_id, principal, digest, record, "
    "signature, kid, status, created_at, signatures"
)

#: The order records of one request are listed in (the order they are written).
KIND_ORDER = ("action_request", "policy_decision", "approval_event", "audit_event")


class RecordChanged(IntegrityError):
    """A stored KLA record no longer hashes to its stored digest, or is filed under
    another request than its own (edited in the database)."""


def request_id_of(record: Any) -> str | None:
    """The id of the action request a record belongs to: its ``action_request_id``
    (an action request, a policy decision, an approval event) or its
    ``action_request.action_request_id`` (an audit event); None when it has none."""
    if not isinstance(record, dict):
        return None
    rid = record.get("action_request_id")
    if rid is None and isinstance(ref := record.get("action_request"), dict):
        rid = ref.get("action_request_id")
    return rid if isinstance(rid, str) else None


@dataclass(frozen=True)
class KlaRow:
    """One stored record. ``record`` is the canonical JSON text; :meth:`value` parses it."""

    record_id: str
    kind: str
    action_request_id: str | None
    execution_id: str | None
    principal: str
    digest: str
    record: str
    signature: str | None
    kid: str | None
    status: str
    created_at: str
    #: Signatures beside ``signature``/``kid`` (issue 21): JSON ``[{alg, kid, signature}]``.
    signatures: str | None = None

    def value(self) -> dict[str, Any]:
        """The record, parsed strictly (it was stored canonical, so it parses back exactly).

        Fails closed: a record that does not hash to its stored ``digest`` (edited in the
        database) raises :class:`RecordChanged` (``record_hash_mismatch``) rather than be
        served, decided on or exported (decision 911; one SHA-256 per read)."""
        recomputed = self.recomputed_digest()
        if recomputed != self.digest:
            raise RecordChanged(
                f"KLA record {self.record_id!r:.80} does not hash to its stored digest "
                f"{self.digest} (it hashes to {recomputed}): it was changed in the database; "
                "run `warden verify`",
                reason=IntegrityReason.RECORD_HASH_MISMATCH,
            )
        parsed = self._parsed()
        # The column is what requests are looked up by (the outcome check reads a
        # request's decision through it): a record filed under another request's id
        # would decide that request (decision 916).
        if self.action_request_id is not None and self.action_request_id != request_id_of(parsed):
            raise RecordChanged(
                f"KLA record {self.record_id!r:.80} is filed under action request "
                f"{self.action_request_id!r:.80} but is {request_id_of(parsed)!r:.80}'s: it "
                "was changed in the database; run `warden verify`",
                reason=IntegrityReason.RECORD_HASH_MISMATCH,
            )
        return parsed

    def filed_under(self) -> str | None:
        """The request id this row is found by: its ``action_request_id`` column, or,
        where that is empty (a held record whose id is unusable), the id its record
        carries. A record carries its request's id, so an honest row's is the record's."""
        if self.action_request_id is not None:
            return self.action_request_id
        try:
            return request_id_of(self._parsed())
        except (WardenError, ValueError):
            return None

    def _parsed(self) -> dict[str, Any]:
        parsed = parse_strict_json(self.record)
        if not isinstance(parsed, dict):  # pragma: no cover - only objects are stored
            raise ValueError(f"kla record {self.record_id} is not a JSON object")
        return parsed

    def recomputed_digest(self) -> str:
        """The digest of the record as stored, recomputed (never the ``digest`` column).

        Records are stored as their RFC 8785 canonical text, so the digest is the SHA-256
        of that text: one hash. Text that does not hash to the stored digest is parsed,
        canonicalized and hashed again (another spelling of the same JSON is still the
        record it claims to be); text that is not a JSON object gives the hash of the
        text itself, which matches no record's digest."""
        fast = "sha256:" + hashlib.sha256(self.record.encode("utf-8")).hexdigest()
        if fast == self.digest:
            return fast
        try:
            return "sha256:" + hashlib.sha256(canonical_bytes(self._parsed())).hexdigest()
        except (WardenError, ValueError):
            return fast

    def sort_key(self) -> tuple[str, int, str]:
        rank = KIND_ORDER.index(self.kind) if self.kind in KIND_ORDER else len(KIND_ORDER)
        return self.created_at, rank, self.record_id


def _row(r: Any) -> KlaRow:
    return KlaRow(*(r[i] for i in range(12)))


class SqlKlaRecords:
    """The ``kla_records`` table on an open DB-API cursor (``q`` adapts ``?`` placeholders)."""

    def __init__(self, cur: Any, q: Callable[[str], str]) -> None:
        self._cur = cur
        self._q = q

    def insert(self, row: KlaRow) -> None:
        """Insert one record (the caller checked that its principal has no record of
        that id; the key is ``(principal, record_id)``). On PostgreSQL
        it is sent with the transaction's next statement (nothing reads its result;
        :meth:`~warden.store.sql._LazyBegin.defer`, decision 701)."""
        defer = getattr(self._cur, "defer", None)
        (defer or self._cur.execute)(
            self._q(
                f"INSERT INTO kla_records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                row.record_id,
                row.kind,
                row.action_request_id,
                row.execution_id,
                row.principal,
                row.digest,
                row.record,
                row.signature,
                row.kid,
                row.status,
                row.created_at,
                row.signatures,
            ),
        )

    def get(self, record_id: str, principal: str) -> KlaRow | None:
        """``principal``'s record ``record_id``, or None. Rows are keyed per principal
        (migration 0015): an action request's id is unique within its principal only."""
        self._cur.execute(
            self._q(f"SELECT {_COLUMNS} FROM kla_records WHERE principal = ? AND record_id = ?"),
            (principal, record_id),
        )
        row = self._cur.fetchone()
        return _row(row) if row is not None else None

    def with_id(self, record_id: str) -> list[KlaRow]:
        """Every principal's record ``record_id`` (for readers who may read every
        principal's: approvers, admins), ordered by principal."""
        self._cur.execute(
            self._q(f"SELECT {_COLUMNS} FROM kla_records WHERE record_id = ? ORDER BY principal"),
            (record_id,),
        )
        return [_row(r) for r in self._cur.fetchall()]

    def for_request(self, action_request_id: str, principal: str | None = None) -> list[KlaRow]:
        """Every record of ``principal``'s action request (the request itself included),
        in order; ``principal`` None: every principal's records under that id."""
        sql = f"SELECT {_COLUMNS} FROM kla_records WHERE action_request_id = ?"
        params: tuple[str, ...] = (action_request_id,)
        if principal is not None:
            sql, params = sql + " AND principal = ?", (*params, principal)
        self._cur.execute(self._q(sql), params)
        return sorted((_row(r) for r in self._cur.fetchall()), key=KlaRow.sort_key)

    def for_execution(self, execution_id: str) -> list[KlaRow]:
        """Every record of one execution, in the order they were written."""
        self._cur.execute(
            self._q(f"SELECT {_COLUMNS} FROM kla_records WHERE execution_id = ?"),
            (execution_id,),
        )
        return sorted((_row(r) for r in self._cur.fetchall()), key=KlaRow.sort_key)
