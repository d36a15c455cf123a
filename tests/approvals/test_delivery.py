"""The outbox and the delivery worker, end to end over real HTTP on loopback and a real
SQLite store: signed delivery, retries with backoff, leases, one send per row."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Any

import pytest

from warden.approvals.notifier import Delivery, DeliveryStatus, DeliveryWorker, Notifier
from warden.approvals.webhooks import WebhookConfig, WebhooksFile, verify
from warden.errors import StoreUnavailable
from warden.store.outbox_sql import (
    SqlOutbox,
    claim_due,
    list_deliveries,
    mark_delivered,
    mark_retry,
)
from warden.store.sql import SqlStore, open_store

SECRET = "cc237f7fe354609bb41360c6530a2deb7926f3cc55e91df3ff90e37202950b6c"
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
VIEW = {"id": "task_1", "state": "approved", "history": []}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1 that records requests and answers from a script."""

    statuses: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    requests: list[Received] = field(default_factory=list)
    server: HTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
                time.sleep(receiver.delay_s)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *_args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), rec.handler())
    server.daemon_threads = False  # server_close joins the handler threads
    rec.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStore]:
    s = open_store(database_url)
    try:
        yield s
    finally:
        s.close()


def config(url: str, *, allow: tuple[Any, ...] = ("loopback",), **kw: Any) -> WebhooksFile:
    hook = WebhookConfig(id="desk", url=url, secret=SECRET, **kw)
    return WebhooksFile(webhooks=(hook,), allow_networks=allow)


def enqueue(store: SqlStore, cfg: WebhooksFile, event: str = "approved") -> Delivery:
    with store._write() as cur:
        assert Notifier(cfg).enqueue(SqlOutbox(cur, store._q), VIEW, event, NOW) == 1
    (row,) = [r for r in list_deliveries(store) if r.event == event]
    return row


def worker(store: SqlStore, cfg: WebhooksFile, **kw: Any) -> DeliveryWorker:
    kw.setdefault("timeout_s", 2.0)
    return DeliveryWorker(store, cfg, **kw)


def test_delivery_end_to_end(store: SqlStore, receiver: Receiver) -> None:
    cfg = config(receiver.url)
    row = enqueue(store, cfg)
    assert row.status is DeliveryStatus.PENDING and row.attempts == 0
    with worker(store, cfg) as w:
        assert w.run_once(NOW) == 1
        assert w.run_once(NOW) == 0
    (got,) = receiver.requests
    assert got.path == "/hook"
    assert got.body == row.body.encode("utf-8")  # the stored bytes, exactly
    assert got.headers["Content-Type"] == "application/json"
    result = verify(SECRET, got.headers, got.body, int(time.time()))
    assert result.ok, result
    assert abs(int(got.headers["X-ADCP-Timestamp"]) - time.time()) < 60  # signed at send time
    (done,) = list_deliveries(store, task_id="task_1")
    assert done.status is DeliveryStatus.DELIVERED
    assert done.attempts == 1 and done.response_status == 200
    assert done.delivered_at == NOW and done.lease_until is None and done.last_error is None
    assert list_deliveries(store, task_id="other") == []


def test_retry_with_backoff_then_delivered(store: SqlStore, receiver: Receiver) -> None:
    receiver.statuses = [500, 503, 200]
    cfg = config(receiver.url)
    enqueue(store, cfg)
    with worker(store, cfg, backoff_base_s=1.0) as w:
        assert w.run_once(NOW) == 1
        (r1,) = list_deliveries(store)
        assert (r1.status, r1.attempts, r1.response_status) == (DeliveryStatus.PENDING, 1, 500)
        assert r1.last_error == "HTTP 500"
        assert r1.next_attempt_at == NOW + timedelta(seconds=1)
        assert w.run_once(NOW + timedelta(milliseconds=999)) == 0  # not due yet
        assert w.run_once(r1.next_attempt_at) == 1
        (r2,) = list_deliveries(store)
        assert (r2.attempts, r2.response_status, r2.last_error) == (2, 503, "HTTP 503")
        assert r2.next_attempt_at == r1.next_attempt_at + timedelta(seconds=2)  # doubled
        assert w.run_once(r2.next_attempt_at) == 1
    (r3,) = list_deliveries(store)
    assert (r3.status, r3.attempts, r3.response_status) == (DeliveryStatus.DELIVERED, 3, 200)
    assert r3.delivered_at == r2.next_attempt_at
    assert r3.last_error == "HTTP 503"  # the last failure stays on record
    assert len(receiver.requests) == 3
    assert len({r.body for r in receiver.requests}) == 1  # the same bytes every time


def test_gives_up_after_max_attempts(store: SqlStore, receiver: Receiver) -> None:
    receiver.statuses = [500, 500, 500]
    cfg = config(receiver.url)
    enqueue(store, cfg)
    with worker(store, cfg, max_attempts=2) as w:
        assert w.run_once(NOW) == 1
        assert w.run_once(NOW + timedelta(seconds=1)) == 1
        assert w.run_once(NOW + timedelta(days=1)) == 0
    (row,) = list_deliveries(store)
    assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.FAILED, 2, "HTTP 500")
    assert len(receiver.requests) == 2


@pytest.mark.parametrize("same_store", [True, False], ids=["one-store", "two-replicas"])
def test_two_workers_deliver_one_row_once(
    store: SqlStore, receiver: Receiver, database_url: str, same_store: bool
) -> None:
    receiver.delay_s = 0.2
    cfg = config(receiver.url)
    enqueue(store, cfg)
    other = store if same_store else open_store(database_url)
    counts: list[int] = []
    barrier = threading.Barrier(2)
    try:
        with worker(store, cfg) as a, worker(other, cfg) as b:

            def run(w: DeliveryWorker) -> None:
                barrier.wait()
                counts.append(w.run_once(NOW))

            threads = [threading.Thread(target=run, args=(w,)) for w in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        if other is not store:
            other.close()
    assert sorted(counts) == [0, 1]
    assert len(receiver.requests) == 1
    (row,) = list_deliveries(store)
    assert (row.status, row.attempts) == (DeliveryStatus.DELIVERED, 1)


def test_an_expired_lease_is_claimed_again_and_the_old_claim_is_fenced(
    store: SqlStore, receiver: Receiver
) -> None:
    cfg = config(receiver.url)
    enqueue(store, cfg)
    (stale,) = claim_due(store, NOW, 30.0, 10)  # a worker that then died
    assert (stale.status, stale.attempts) == (DeliveryStatus.SENDING, 1)
    assert stale.lease_until == NOW + timedelta(seconds=30)
    assert claim_due(store, NOW + timedelta(seconds=29), 30.0, 10) == []  # lease holds
    with worker(store, cfg) as w:
        assert w.run_once(NOW + timedelta(seconds=30)) == 1
    (row,) = list_deliveries(store)
    assert (row.status, row.attempts) == (DeliveryStatus.DELIVERED, 2)
    # the overtaken worker's late outcome changes nothing
    assert not mark_retry(store, stale, NOW, "late", 500)
    assert not mark_delivered(store, stale, NOW, 200)
    assert list_deliveries(store) == [row]


def test_destination_is_checked_again_before_each_send(store: SqlStore, receiver: Receiver) -> None:
    enqueue(store, config(receiver.url))
    with worker(store, config(receiver.url, allow=())) as w:  # loopback no longer allowed
        assert w.run_once(NOW) == 1
    assert receiver.requests == []
    (row,) = list_deliveries(store)
    assert row.status is DeliveryStatus.PENDING and row.attempts == 1
    assert row.last_error is not None and row.last_error.startswith("destination refused")
    assert row.response_status is None


def test_a_connection_failure_is_retried(store: SqlStore) -> None:
    probe = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()  # nothing listens there now
    cfg = config(f"http://127.0.0.1:{port}/hook")
    enqueue(store, cfg)
    with worker(store, cfg, timeout_s=1.0) as w:
        assert w.run_once(NOW) == 1
    (row,) = list_deliveries(store)
    assert row.status is DeliveryStatus.PENDING
    assert row.last_error is not None and row.last_error.startswith("ConnectError")


def test_a_row_for_a_removed_webhook_fails(store: SqlStore, receiver: Receiver) -> None:
    enqueue(store, config(receiver.url))
    renamed = WebhooksFile(
        webhooks=(WebhookConfig(id="other", url=receiver.url, secret=SECRET),),
        allow_networks=("loopback",),
    )
    with worker(store, renamed) as w:
        assert w.run_once(NOW) == 1
    (row,) = list_deliveries(store)
    assert row.status is DeliveryStatus.FAILED
    assert row.last_error == "webhook is no longer configured"
    assert receiver.requests == []


def test_the_thread_delivers_and_stops(store: SqlStore, receiver: Receiver) -> None:
    cfg = config(receiver.url)
    enqueue(store, cfg)
    w = worker(store, cfg, interval_s=0.02)
    w.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if list_deliveries(store)[0].status is DeliveryStatus.DELIVERED:
                break
            time.sleep(0.02)
    finally:
        w.stop()
    assert list_deliveries(store)[0].status is DeliveryStatus.DELIVERED
    assert len(receiver.requests) == 1
    with pytest.raises(RuntimeError):
        w.start()


def test_enqueue_commits_with_the_store_transaction(store: SqlStore, receiver: Receiver) -> None:
    cfg = config(receiver.url, events=("denied",))
    with store.transaction() as tx:
        assert Notifier(cfg).enqueue(tx.outbox, VIEW, "approved", NOW) == 0
        assert Notifier(cfg).enqueue(tx.outbox, VIEW, "denied", NOW) == 1
    assert [r.event for r in list_deliveries(store)] == ["denied"]

    class Boom(Exception):
        pass

    with pytest.raises(StoreUnavailable), store.transaction() as tx:
        Notifier(cfg).enqueue(tx.outbox, VIEW, "denied", NOW)
        raise Boom
    assert len(list_deliveries(store)) == 1  # rolled back with the transaction


def test_worker_settings_are_checked(store: SqlStore) -> None:
    with pytest.raises(ValueError):
        DeliveryWorker(store, WebhooksFile(), lease_s=5.0, timeout_s=5.0)
