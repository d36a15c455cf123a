"""SQL for the webhook outbox: the ``webhook_deliveries`` table (migration 0004).

:class:`SqlOutbox` inserts rows inside the caller's open write transaction (the one
that changed the approval task; ``SqlSpendTx.outbox``). The module functions are the
:class:`~warden.approvals.notifier.DeliveryWorker`'s, each its own write transaction
on a :class:`~warden.store.sql.SqlStore`:

- :func:`claim_due` moves due rows ``pending → sending`` (or takes back a ``sending``
  row whose lease expired) with a conditional UPDATE, so two replicas never claim one
  row while its lease holds; a claim counts as an attempt.
- :func:`mark_delivered`, :func:`mark_retry` and :func:`mark_failed` record an
  outcome only if the row is still the caller's claim (``status = 'sending'`` and the
  same ``attempts``): a worker whose lease expired and was overtaken changes nothing.

Times are RFC 3339 UTC text with microseconds and ``+00:00``
(:func:`~warden.store.outbox.rfc3339`), so text order is time order and the due
test is a string comparison on the ``(status, next_attempt_at)`` index.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from warden.store.outbox import Delivery, DeliveryStatus, rfc3339

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

_COLUMNS = (
    "delivery_id, webhook_id, task_id, event, url, body, status, attempts, next_attempt_at, "
    "created_at, lease_until, last_error, response_status, delivered_at"
)
_MAX_ERROR = 1000


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _delivery(row: Any) -> Delivery:
    return Delivery(
        delivery_id=row[0],
        webhook_id=row[1],
        task_id=row[2],
        event=row[3],
        url=row[4],
        body=row[5],
        status=DeliveryStatus(row[6]),
        attempts=int(row[7]),
        next_attempt_at=datetime.fromisoformat(row[8]),
        created_at=datetime.fromisoformat(row[9]),
        lease_until=_time(row[10]),
        last_error=row[11],
        response_status=row[12],
        delivered_at=_time(row[13]),
    )


class SqlOutbox:
    """:class:`~warden.approvals.notifier.Outbox` on an open DB-API cursor; ``q``
    adapts ``?`` placeholders to the driver."""

    def __init__(self, cur: Any, q: Any) -> None:
        self._cur = cur
        self._q = q

    def add(self, delivery: Delivery) -> None:
        """Insert ``delivery`` as given (normally ``pending``, 0 attempts). A repeated
        ``delivery_id`` fails the transaction (a constraint error)."""
        self._cur.execute(
            self._q(
                f"INSERT INTO webhook_deliveries ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                delivery.delivery_id,
                delivery.webhook_id,
                delivery.task_id,
                delivery.event,
                delivery.url,
                delivery.body,
                delivery.status.value,
                delivery.attempts,
                rfc3339(delivery.next_attempt_at),
                rfc3339(delivery.created_at),
                rfc3339(delivery.lease_until) if delivery.lease_until else None,
                delivery.last_error,
                delivery.response_status,
                rfc3339(delivery.delivered_at) if delivery.delivered_at else None,
            ),
        )


_DUE = (
    "((status = 'pending' AND next_attempt_at <= ?) OR (status = 'sending' AND lease_until <= ?))"
)


def claim_due(store: SqlStore, now: datetime, lease_s: float, limit: int) -> list[Delivery]:
    """Claim up to ``limit`` rows due at ``now`` (oldest due first) for ``lease_s`` s.

    Due: ``pending`` with ``next_attempt_at <= now``, or ``sending`` with an expired
    lease. Each claimed row becomes ``sending`` with ``lease_until = now + lease_s``
    and ``attempts + 1``; the returned rows show that state. The UPDATE repeats the
    due test, so a row another worker claimed first is skipped, not taken twice.
    Raises :class:`~warden.errors.StoreUnavailable` on a store failure.
    """
    at = rfc3339(now)
    lease = rfc3339(now + timedelta(seconds=lease_s))
    q = store._q  # noqa: SLF001 - same package
    with store._write() as cur:  # noqa: SLF001 - same package
        cur.execute(
            q(
                f"SELECT delivery_id FROM webhook_deliveries WHERE {_DUE} "
                "ORDER BY next_attempt_at, delivery_id LIMIT ?"
            ),
            (at, at, limit),
        )
        ids = [r[0] for r in cur.fetchall()]
        claimed: list[Delivery] = []
        for delivery_id in ids:
            cur.execute(
                q(
                    "UPDATE webhook_deliveries SET status = 'sending', lease_until = ?, "
                    f"attempts = attempts + 1 WHERE delivery_id = ? AND {_DUE}"
                ),
                (lease, delivery_id, at, at),
            )
            if cur.rowcount != 1:
                continue
            cur.execute(
                q(f"SELECT {_COLUMNS} FROM webhook_deliveries WHERE delivery_id = ?"),
                (delivery_id,),
            )
            claimed.append(_delivery(cur.fetchone()))
        return claimed


def _finish(store: SqlStore, row: Delivery, sets: str, params: tuple[Any, ...]) -> bool:
    q = store._q  # noqa: SLF001 - same package
    with store._write() as cur:  # noqa: SLF001 - same package
        cur.execute(
            q(
                f"UPDATE webhook_deliveries SET {sets} "
                "WHERE delivery_id = ? AND status = 'sending' AND attempts = ?"
            ),
            (*params, row.delivery_id, row.attempts),
        )
        return bool(cur.rowcount == 1)


def _error(text: str | None) -> str | None:
    return text[:_MAX_ERROR] if text is not None else None


def mark_delivered(
    store: SqlStore, row: Delivery, at: datetime, response_status: int | None
) -> bool:
    """Record a 2xx answer: ``delivered``, ``response_status``, ``delivered_at = at``,
    lease cleared (``last_error`` keeps the previous failure, if any). Returns False
    when ``row`` is no longer this claim (nothing changed)."""
    return _finish(
        store,
        row,
        "status = 'delivered', response_status = ?, delivered_at = ?, lease_until = NULL",
        (response_status, rfc3339(at)),
    )


def mark_retry(
    store: SqlStore,
    row: Delivery,
    next_attempt_at: datetime,
    error: str,
    response_status: int | None,
) -> bool:
    """Record a failed attempt to be retried: back to ``pending``, due at
    ``next_attempt_at``, ``last_error`` (truncated to 1000 chars) and
    ``response_status`` (None when no HTTP answer came). False if not this claim."""
    return _finish(
        store,
        row,
        "status = 'pending', next_attempt_at = ?, last_error = ?, response_status = ?, "
        "lease_until = NULL",
        (rfc3339(next_attempt_at), _error(error), response_status),
    )


def mark_failed(
    store: SqlStore,
    row: Delivery,
    at: datetime,
    error: str,
    response_status: int | None,
) -> bool:
    """Record the last attempt failing for good: ``failed`` with ``last_error`` and
    ``response_status``; ``next_attempt_at = at`` keeps when it gave up. False if not
    this claim."""
    return _finish(
        store,
        row,
        "status = 'failed', next_attempt_at = ?, last_error = ?, response_status = ?, "
        "lease_until = NULL",
        (rfc3339(at), _error(error), response_status),
    )


def list_deliveries(store: SqlStore, task_id: str | None = None) -> list[Delivery]:
    """Every outbox row (or those of ``task_id``), oldest first."""
    q = store._q  # noqa: SLF001 - same package
    where, params = ("WHERE task_id = ? ", (task_id,)) if task_id is not None else ("", ())
    with store._write() as cur:  # noqa: SLF001 - same package
        cur.execute(
            q(f"SELECT {_COLUMNS} FROM webhook_deliveries {where}ORDER BY created_at, delivery_id"),
            params,
        )
        return [_delivery(r) for r in cur.fetchall()]
