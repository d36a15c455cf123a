"""Approval-task notifications: AdCP webhook payloads, a durable outbox, a delivery worker.

When an approval task changes state, :meth:`Notifier.enqueue` writes one outbox row per
subscribed webhook *inside the transaction that changed the task*, so a notification
exists exactly when the change committed. :class:`DeliveryWorker` sends the rows later:
it claims due rows with a lease (a conditional UPDATE, so two replicas never send one
row in the normal path), re-checks the destination, POSTs the stored bytes signed at
send time as the webhook's ``signing`` says (AdCP's RFC 9421 webhook profile with
Warden's own key, or the legacy HMAC-SHA256), and records every outcome in the row,
retrying with exponential backoff until ``max_attempts``.

Delivery is at least once: a worker that dies after the receiver answered but before
the row was marked leaves it to be sent again when the lease expires. Receivers dedupe
on the payload's ``idempotency_key``, which is stable across retries (the stored body
is resent byte for byte).

Payloads are AdCP ``core/mcp-webhook-payload.json`` (specs/adcp-spend-kla.md §1.4;
shipped under ``warden/schemas/adcp``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from warden.adcp.webhook_signing import WebhookSigner
from warden.approvals.webhooks import (
    EVENTS,
    DestinationRefused,
    Resolver,
    WebhookConfig,
    WebhooksFile,
    check_destination,
    encode_body,
    signature_headers,
)
from warden.store import outbox_sql
from warden.store.outbox import Delivery, DeliveryStatus, rfc3339  # noqa: F401 - public here too

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

log = logging.getLogger(__name__)

TASK_STATUS: Mapping[str, str] = {
    "pending": "input-required",
    "approved": "completed",
    "consumed": "completed",
    "denied": "rejected",
    "expired": "failed",
    "canceled": "canceled",
}
"""Approval ``state`` → AdCP ``enums/task-status.json``; any other state is ``unknown``."""

DEFAULT_TASK_TYPE = "create_media_buy"
"""``task_type`` when the task names no AdCP task: ``enums/task-type.json`` has no
approval value; this is the type the payload schema's own human-approval example uses."""

_IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_.:-]{16,255}")


@cache
def task_types() -> frozenset[str]:
    """The ``task_type`` values the shipped ``enums/task-type.json`` allows."""
    text = (
        resources.files("warden.schemas")
        .joinpath("adcp", "enums", "task-type.json")
        .read_text(encoding="utf-8")
    )
    return frozenset(json.loads(text)["enum"])


def _task_id(view: Mapping[str, Any]) -> str:
    task_id = view.get("task_id", view.get("id"))
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("task view has no 'task_id' (or 'id') string")
    return task_id


def _task_type(view: Mapping[str, Any]) -> str:
    action = view.get("action")
    detail = view.get("detail")
    candidates = [view.get("task_type")]
    if isinstance(action, Mapping):
        candidates.append(action.get("name"))
    if isinstance(detail, Mapping):
        candidates.append(detail.get("task_type"))
    allowed = task_types()
    for c in candidates:
        if isinstance(c, str) and c in allowed:
            return c
    return DEFAULT_TASK_TYPE


def _actor(view: Mapping[str, Any], event: str) -> str | None:
    """The principal of the latest history item for ``event`` (``by.principal``)."""
    history = view.get("history")
    if not isinstance(history, list):
        return None
    for item in reversed(history):
        if isinstance(item, Mapping) and item.get("event") == event:
            by = item.get("by")
            principal = by.get("principal") if isinstance(by, Mapping) else None
            return principal if isinstance(principal, str) and principal else None
    return None


def build_payload(
    task_view: Mapping[str, Any],
    event: str,
    *,
    delivery_id: str,
    operation_id: str,
    now: datetime,
    actor: str | None = None,
) -> dict[str, Any]:
    """The AdCP ``core/mcp-webhook-payload.json`` object for one task event.

    ``task_view``: the task as the approval desk shows it (JSON-ready; must carry
    ``task_id`` or ``id``; ``state`` is its approval state). ``delivery_id``: hex, the
    outbox row id; ``idempotency_key`` is ``"whk_" + delivery_id``. ``now``: aware.

    Fields: ``idempotency_key``, ``operation_id``, ``task_id``, ``task_type`` (the
    view's ``task_type``, ``action.name`` or ``detail.task_type`` when it is an AdCP
    task type, else :data:`DEFAULT_TASK_TYPE`), ``status`` (:data:`TASK_STATUS` of
    ``state``), ``timestamp`` (RFC 3339 UTC, ms), ``message`` (``"approval task <id>
    <event>[ by <actor>]"``; ``actor`` defaults to ``by.principal`` of the view's latest
    ``history`` item for ``event``) and ``result`` (the task view itself).
    Raises ``ValueError`` for an unknown event, a view without a task id, an
    idempotency key outside ``^[A-Za-z0-9_.:-]{16,255}$`` or a naive ``now``.
    """
    if event not in EVENTS:
        raise ValueError(f"unknown approval event {event!r}")
    task_id = _task_id(task_view)
    key = "whk_" + delivery_id
    if _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise ValueError("delivery_id does not make a valid idempotency_key")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    state = task_view.get("state")
    status = TASK_STATUS.get(state, "unknown") if isinstance(state, str) else "unknown"
    who = actor if actor is not None else _actor(task_view, event)
    if event == "voted":
        message = f"approval task {task_id} received a vote"
        message += f" from {who}" if who else ""
    else:
        message = f"approval task {task_id} {event}" + (f" by {who}" if who else "")
    stamp = now.astimezone(UTC).isoformat(timespec="milliseconds")
    return {
        "idempotency_key": key,
        "operation_id": operation_id,
        "task_id": task_id,
        "task_type": _task_type(task_view),
        "status": status,
        "timestamp": stamp.replace("+00:00", "Z"),
        "message": message,
        "result": dict(task_view),
    }


class Outbox(Protocol):
    """Where :meth:`Notifier.enqueue` writes: rows inside the caller's open write
    transaction (``SqlSpendTx.outbox`` in the SQL store)."""

    def add(self, delivery: Delivery) -> None:
        """Insert one pending row; a repeated ``delivery_id`` is an error."""
        ...


class Notifier:
    """Turns approval-task events into outbox rows for the configured webhooks."""

    def __init__(self, config: WebhooksFile) -> None:
        self.config = config

    def enqueue(
        self,
        outbox: Outbox,
        task_view: Mapping[str, Any],
        event: str,
        now: datetime,
        *,
        actor: str | None = None,
    ) -> int:
        """Add one pending delivery per webhook subscribed to ``event``; returns how many.

        Call inside the transaction that changed the task. Each row gets a fresh
        ``delivery_id`` (uuid4 hex), the payload of :func:`build_payload` encoded with
        compact separators, and is due at ``now``. Raises ``ValueError`` as
        :func:`build_payload` does (before writing anything).
        """
        if event not in EVENTS:
            raise ValueError(f"unknown approval event {event!r}")
        task_id = _task_id(task_view)
        rows: list[Delivery] = []
        for hook in self.config.webhooks:
            if not hook.wants(event):
                continue
            delivery_id = uuid.uuid4().hex
            payload = build_payload(
                task_view,
                event,
                delivery_id=delivery_id,
                operation_id=hook.operation_id or task_id,
                now=now,
                actor=actor,
            )
            rows.append(
                Delivery(
                    delivery_id=delivery_id,
                    webhook_id=hook.id,
                    task_id=task_id,
                    event=event,
                    url=hook.url,
                    body=encode_body(payload).decode("utf-8"),
                    status=DeliveryStatus.PENDING,
                    attempts=0,
                    next_attempt_at=now,
                    created_at=now,
                )
            )
        for row in rows:
            outbox.add(row)
        return len(rows)


def backoff(attempts: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt: ``base_s * 2**(attempts-1)``
    capped at ``cap_s`` (1, 2, 4, 8 … for ``base_s = 1``). No jitter."""
    return float(min(cap_s, base_s * (2 ** max(0, attempts - 1))))


class DeliveryWorker:
    """Sends due outbox rows from ``store`` to the webhooks of ``config``.

    ``run_once(now)`` does one pass synchronously (tests, or a caller's own loop);
    ``start()`` runs passes on a daemon thread every ``interval_s`` (at once again when
    a pass filled its batch) until ``stop()``. Settings: ``lease_s`` (a claim's lease,
    longer than ``timeout_s``), ``batch`` (rows per pass), ``max_attempts`` (then
    ``failed``), ``backoff_base_s``/``backoff_cap_s`` (see :func:`backoff`),
    ``timeout_s`` (per HTTP request). The worker owns its httpx client unless one is
    given; ``stop()``/``close()`` (or ``with``) closes it. Proxies from the environment
    are ignored (``trust_env=False``) so the destination guard judges the real peer;
    redirects are not followed.
    """

    def __init__(
        self,
        store: SqlStore,
        config: WebhooksFile,
        *,
        interval_s: float = 1.0,
        lease_s: float = 60.0,
        batch: int = 16,
        max_attempts: int = 8,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 3600.0,
        timeout_s: float = 5.0,
        client: httpx.Client | None = None,
        resolver: Resolver | None = None,
        wall_clock: Callable[[], float] = time.time,
        signer: WebhookSigner | None = None,
    ) -> None:
        if max_attempts < 1 or batch < 1 or lease_s <= timeout_s:
            raise ValueError("need max_attempts >= 1, batch >= 1 and lease_s > timeout_s")
        self._ox = outbox_sql
        self._store = store
        self.config = config
        self.interval_s = interval_s
        self.lease_s = lease_s
        self.batch = batch
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self._owns_client = client is None
        self._client = client or httpx.Client(
            timeout=timeout_s, follow_redirects=False, trust_env=False
        )
        self._resolver = resolver
        self._wall_clock = wall_clock
        self._signer = signer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> None:
        """Start the daemon thread (once)."""
        if self._thread is not None:
            raise RuntimeError("delivery worker already started")
        self._thread = threading.Thread(target=self._run, name="warden-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (waits for the pass in progress) and close the client."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> DeliveryWorker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                sent = self.run_once()
            except Exception:  # noqa: BLE001 - a failed pass is retried next tick
                log.warning("webhook delivery pass failed", exc_info=True)
                sent = 0
            if sent < self.batch:
                self._stop.wait(self.interval_s)

    # one pass
    def run_once(self, now: datetime | None = None) -> int:
        """Claim up to ``batch`` due rows at ``now`` (default: the current UTC time),
        attempt each, record each outcome; returns how many rows were attempted.

        Scheduling uses ``now``; the signature timestamp is always the wall clock at
        send time. Raises :class:`~warden.errors.StoreUnavailable` if the store fails.
        """
        explicit = now is not None
        start = now if now is not None else datetime.now(UTC)
        claimed = self._ox.claim_due(self._store, start, self.lease_s, self.batch)
        for row in claimed:
            self._attempt(row, start if explicit else None)
        return len(claimed)

    def _sign(self, hook: WebhookConfig, url: str, body: bytes) -> dict[str, str]:
        """The headers of one delivery, signed at the wall clock as ``hook`` says:
        RFC 9421 with Warden's webhook key, or the legacy HMAC. Never both, never
        neither: an ``rfc9421`` hook without a signer raises (the attempt fails)."""
        now = int(self._wall_clock())
        if hook.mode == "hmac-sha256":
            assert hook.secret is not None  # WebhookConfig guarantees it
            return signature_headers(hook.secret.get_secret_value(), now, body)
        if self._signer is None:
            raise RuntimeError("no webhook signing key: cannot sign an rfc9421 delivery")
        return self._signer.headers(url, body, now)

    def _attempt(self, row: Delivery, now: datetime | None) -> None:
        """Send ``row`` and record the outcome at ``now`` (None: the time it finished)."""
        hook = self.config.get(row.webhook_id)
        if hook is None:
            self._ox.mark_failed(
                self._store, row, now or datetime.now(UTC), "webhook is no longer configured", None
            )
            return
        status: int | None = None
        try:
            if self._resolver is None:
                check_destination(row.url, self.config.allow)
            else:
                check_destination(row.url, self.config.allow, resolver=self._resolver)
            body = row.body.encode("utf-8")
            headers = self._sign(hook, row.url, body)
            with self._client.stream("POST", row.url, content=body, headers=headers) as resp:
                status = resp.status_code
            error = None if 200 <= status < 300 else f"HTTP {status}"
        except DestinationRefused as exc:
            error = f"destination refused: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - any failure is this attempt's outcome
            error = f"{type(exc).__name__}: {exc}"  # httpx errors, an URL httpx refuses …
        done = now or datetime.now(UTC)
        if error is None:
            self._ox.mark_delivered(self._store, row, done, status)
        elif row.attempts >= self.max_attempts:
            self._ox.mark_failed(self._store, row, done, error, status)
        else:
            delay = backoff(row.attempts, self.backoff_base_s, self.backoff_cap_s)
            self._ox.mark_retry(self._store, row, done + timedelta(seconds=delay), error, status)
