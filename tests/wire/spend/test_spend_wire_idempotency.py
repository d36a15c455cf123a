"""Idempotency-Key on every spend mutation: replay without a second effect, conflict
without leaking the stored answer, errors never cached, expiry (injected clock), key
format, atomicity of claim and effect, and 20 concurrent duplicates over real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, start_server
from spend_wire_helpers import Api, Clock, Reply, assert_error, db_rows, open_api, server_api, tree

from warden.crypto.canonical import sha256_hex
from warden.errors import UNAVAILABLE_RETRY_AFTER_S
from warden.runtime import Runtime
from warden.store.idempotency import Idempotency
from warden.wire.spend.operations import SpendWire

KEY = "3f2a9c1e-0b7d-4c55-9e61-2d8f0a4b7c13"
TTL = 3600


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    """Every test here runs on SQLite and on PostgreSQL."""
    return make_backend_runtime


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(runtime: Runtime, clock: Clock) -> Iterator[Api]:
    yield from open_api(runtime, Idempotency(TTL, clock))


def reservations(rt: Runtime) -> int:
    return int(db_rows(rt, "SELECT count(*) FROM reservations")[0][0])


def without_flag(reply: Reply) -> dict[str, Any]:
    body = dict(reply.body)
    assert body.pop("replayed") is True
    return body


def test_same_key_same_body_replays_without_a_second_effect(runtime: Runtime, api: Api) -> None:
    bot = tree(runtime)
    first = api.quote(bot, "12.50", key=KEY)
    assert first.status == 200 and "replayed" not in first.body
    for _ in range(3):
        again = api.quote(bot, "12.50", key=KEY)
        assert again.status == 200
        assert without_flag(again) == first.body
    assert reservations(runtime) == 1
    assert api.budget(bot)["reserved"] == "12.50"
    # the stored copy carries no flag; the key itself is stored only as its digest
    rows = db_rows(runtime, "SELECT idem_key, state, status_code, response FROM idempotency_keys")
    assert len(rows) == 1
    digest, state, status, stored = rows[0]
    assert (digest, state, status) == (sha256_hex(KEY.encode()), "completed", 200)
    assert json.loads(stored) == first.body
    assert "replayed" not in stored
    assert KEY not in str(db_rows(runtime, "SELECT * FROM idempotency_keys"))


def test_every_mutation_replays(runtime: Runtime, api: Api) -> None:
    bot = tree(runtime)
    rid = api.reserve(bot, "10")
    rid2 = api.reserve(bot, "3")
    steps: list[tuple[str, str, Any]] = [
        ("POST", f"/v1/reservations/{rid}/commit", {"actualAmount": "9"}),
        ("POST", f"/v1/reservations/{rid2}/release", {"reason": "cancelled"}),
        (
            "PUT",
            "/v1/budgets/other",
            {"kind": "org", "currency": "USD", "cap": "5", "period": "day"},
        ),
        ("POST", "/v1/budget-requests", {"budgetId": bot, "cap": "70", "reason": "more"}),
    ]
    for i, (method, path, body) in enumerate(steps):
        key = f"replay-key-{i:02d}-0123456789"
        first = api.request(method, path, body, key=key)
        second = api.request(method, path, body, key=key)
        assert second.status == first.status, (path, second.body)
        assert without_flag(second) == first.body
    receipt_id = api.get(f"/v1/reservations/{rid}").data["reservation"]["receiptId"]
    undo_key = "replay-key-undo-0123456789"
    first = api.post(f"/v1/receipts/{receipt_id}/undo", key=undo_key)
    second = api.post(f"/v1/receipts/{receipt_id}/undo", key=undo_key)
    assert first.status == 200 and without_flag(second) == first.body
    # each effect happened once: one settlement undone, one release, one budget, one task
    assert (api.budget(bot)["reserved"], api.budget(bot)["settled"]) == ("0", "0")
    assert db_rows(runtime, "SELECT count(*) FROM tasks") == [(1,)]
    assert db_rows(runtime, "SELECT count(*) FROM budgets WHERE budget_id = 'other'") == [(1,)]
    entries = db_rows(runtime, "SELECT step_type, count(*) FROM entries GROUP BY step_type")
    counts = dict(entries)
    assert counts["warden/spend.settle"] == 1
    assert counts["warden/spend.undo"] == 1
    assert counts["warden/spend.release"] == 1


def test_same_key_different_body_is_a_conflict_that_leaks_nothing(
    runtime: Runtime, api: Api
) -> None:
    bot = tree(runtime)
    first = api.quote(bot, "12.50", key=KEY)
    rid = first.data["quote"]["reservation"]["reservationId"]
    r = api.quote(bot, "12.51", key=KEY)
    body = assert_error(r, "idempotency:conflict", 409, resolution="retry")
    text = json.dumps(body)
    assert rid not in text and "12.50" not in text and "data" not in body
    assert set(body) == {"blockedBy", "message", "retryable", "resolution"}
    assert reservations(runtime) == 1
    # a different reservation id is a different request too (the path is hashed)
    other = api.reserve(bot, "1")
    c1 = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "1"}, key=KEY + "-c")
    assert c1.status == 200
    c2 = api.post(f"/v1/reservations/{other}/commit", {"actualAmount": "1"}, key=KEY + "-c")
    assert_error(c2, "idempotency:conflict", 409, resolution="retry")
    assert api.get(f"/v1/reservations/{other}").data["reservation"]["status"] == "held"


def test_keys_are_scoped_per_route(runtime: Runtime, api: Api) -> None:
    bot = tree(runtime)
    rid = api.reserve(bot, "2", key=KEY)
    r = api.post(f"/v1/reservations/{rid}/commit", {"actualAmount": "2"}, key=KEY)
    assert r.status == 200 and "replayed" not in r.body


def test_refusals_are_not_cached(runtime: Runtime, api: Api) -> None:
    # unknown budget, then the budget appears: the same key and body now run
    assert_error(api.quote("late", "1", key=KEY), "input:unknown_budget", 404, resolution="retry")
    assert db_rows(runtime, "SELECT count(*) FROM idempotency_keys") == [(0,)]
    bot = tree(runtime, prefix="late")
    r = api.quote("late", "1", key=KEY)
    assert r.status == 200 and "replayed" not in r.body
    # over the cap, then the caps are raised: the same key and body now run
    body = {"budgetId": bot, "action": "buy", "amount": "60", "currency": "USD"}
    assert_error(
        api.post("/v1/quotes", body, key=KEY + "x"),
        "budget:exceeded",
        402,
        retryable=False,
        resolution="retry",
    )
    for budget_id in (bot, "late.ops"):
        runtime.spend.define_budget(replace(runtime.spend.path(budget_id)[0], cap=Decimal("100")))
    r = api.post("/v1/quotes", body, key=KEY + "x")
    assert r.status == 200 and "replayed" not in r.body
    assert reservations(runtime) == 2


def test_schema_is_validated_before_the_cache(runtime: Runtime, api: Api) -> None:
    bot = tree(runtime)
    assert api.quote(bot, "1", key=KEY).status == 200
    bad = api.post("/v1/quotes", {"budgetId": bot, "amount": "1"}, key=KEY)
    assert_error(bad, "input:invalid", 400, resolution="retry")
    dup = api.post(
        "/v1/quotes",
        content=b'{"budgetId":"x","budgetId":"y","action":"a","amount":"1","currency":"USD"}',
        headers={"content-type": "application/json"},
        key=KEY,
    )
    assert_error(dup, "input:invalid_json", 400, resolution="retry")


def test_expired_keys_are_refused_never_rerun(runtime: Runtime, api: Api, clock: Clock) -> None:
    bot = tree(runtime)
    first = api.quote(bot, "5", key=KEY)
    clock.advance(seconds=TTL - 1)
    assert without_flag(api.quote(bot, "5", key=KEY)) == first.body
    clock.advance(seconds=1)
    for amount in ("5", "6"):  # same body or not: expired, and nothing runs
        r = api.quote(bot, amount, key=KEY)
        body = assert_error(r, "idempotency:expired", 409, resolution="retry")
        assert "new Idempotency-Key" in body["resolution"]["hint"]
    assert reservations(runtime) == 1
    clock.advance(days=30)
    assert_error(api.quote(bot, "5", key=KEY), "idempotency:expired", 409, resolution="retry")
    # a new key runs
    assert api.quote(bot, "5", key=KEY + "-2").status == 200
    assert reservations(runtime) == 2


@pytest.mark.parametrize(
    "key",
    ["short", "x" * 15, "x" * 256, "has space in it 123", "ümlaut-key-0123456789", "a/b" * 8],
)
def test_bad_key_format_changes_nothing(runtime: Runtime, api: Api, key: str) -> None:
    bot = tree(runtime)
    body = {"budgetId": bot, "action": "buy", "amount": "1", "currency": "USD"}
    headers = {"Idempotency-Key": key.encode("utf-8")}
    r = api.post("/v1/quotes", body, headers=headers)
    got = assert_error(r, "input:invalid_idempotency_key", 400, resolution="retry")
    assert "16 to 255" in got["message"]
    assert reservations(runtime) == 0
    assert db_rows(runtime, "SELECT count(*) FROM idempotency_keys") == [(0,)]


def test_longest_and_shortest_keys_work(runtime: Runtime, api: Api) -> None:
    bot = tree(runtime)
    for key in ("a" * 16, "Z_.:-9" * 42 + "abc"):
        assert api.quote(bot, "1", key=key).status == 200
        assert api.quote(bot, "1", key=key).body["replayed"] is True
    assert reservations(runtime) == 2


def test_claim_and_effect_roll_back_together(
    runtime: Runtime, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = tree(runtime)
    real = SpendWire.quote

    def crash_after_reserving(self: SpendWire, tx: Any, eng: Any, body: Any) -> Any:
        real(self, tx, eng, body)  # the hold is taken inside the transaction…
        raise RuntimeError("crash before the answer is stored")

    monkeypatch.setattr(SpendWire, "quote", crash_after_reserving)
    r = api.quote(bot, "7", key=KEY)
    # the store rolls the transaction back and reports it: retrying is safe
    assert_error(r, "store:unavailable", 503, retryable=True, resolution="retry")
    # …and rolled back with the claim: no hold, no key, nothing in the budget
    assert reservations(runtime) == 0
    assert db_rows(runtime, "SELECT count(*) FROM idempotency_keys") == [(0,)]
    assert api.budget(bot)["reserved"] == "0"
    monkeypatch.setattr(SpendWire, "quote", real)
    ok = api.quote(bot, "7", key=KEY)
    assert ok.status == 200 and "replayed" not in ok.body
    assert reservations(runtime) == 1


def test_store_unavailable_says_when_to_retry_as_the_other_wires_do(
    runtime: Runtime, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spend wire's 503 carries the ``Retry-After`` of AdCP's GOVERNANCE_UNAVAILABLE
    and the desk's 503 page (decision 189, 191)."""
    bot = tree(runtime)

    def crash(self: SpendWire, tx: Any, eng: Any, body: Any) -> Any:
        raise RuntimeError("the store failed")

    monkeypatch.setattr(SpendWire, "quote", crash)
    r = api.quote(bot, "7", key=KEY)
    assert_error(r, "store:unavailable", 503, retryable=True, resolution="retry")
    assert r.headers["retry-after"] == str(UNAVAILABLE_RETRY_AFTER_S) == "5"


# -- concurrency over real HTTP -------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "srv")
    yield srv
    srv.stop()


def _concurrently(n: int, call: Callable[[int], Reply]) -> list[Reply]:
    barrier = threading.Barrier(n)
    out: list[Reply | BaseException] = [RuntimeError("not run")] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = call(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    errors = [o for o in out if isinstance(o, BaseException)]
    assert not errors, errors
    return [o for o in out if isinstance(o, Reply)]


def test_twenty_concurrent_duplicates_make_exactly_one_reservation(server: Server) -> None:
    org = {"kind": "org", "currency": "USD", "cap": "100", "period": "none"}
    org["principals"] = ["admin"]  # the bootstrap admin key spends where it is bound
    with server_api(server.data_dir, server.url) as setup:
        assert setup.put("/v1/budgets/acme", org).status == 201

    def call(i: int) -> Reply:
        with server_api(server.data_dir, server.url) as api:  # a connection per thread
            return api.quote("acme", "12.50", key=KEY)

    replies = _concurrently(20, call)
    assert [r.status for r in replies] == [200] * 20
    ids = {r.data["quote"]["reservation"]["reservationId"] for r in replies}
    assert len(ids) == 1
    assert sum("replayed" not in r.body for r in replies) == 1
    assert sum(r.body.get("replayed") is True for r in replies) == 19
    with server_api(server.data_dir, server.url) as check:
        budget = check.budget("acme")
    assert (budget["reserved"], budget["remaining"]) == ("12.50", "87.50")


def test_concurrent_different_bodies_with_one_key_make_one_effect(server: Server) -> None:
    org = {"kind": "org", "currency": "USD", "cap": "100", "period": "none"}
    org["principals"] = ["admin"]  # the bootstrap admin key spends where it is bound
    with server_api(server.data_dir, server.url) as setup:
        assert setup.put("/v1/budgets/acme", org).status == 201

    def call(i: int) -> Reply:
        with server_api(server.data_dir, server.url) as api:
            return api.quote("acme", str(i + 1), key=KEY)

    replies = _concurrently(10, call)
    winners = [r for r in replies if r.status == 200]
    assert len(winners) == 1 and "replayed" not in winners[0].body
    for r in replies:
        if r.status != 200:
            assert_error(r, "idempotency:conflict", 409, resolution="retry")
    with server_api(server.data_dir, server.url) as check:
        assert check.budget("acme")["reserved"] == winners[0].data["quote"]["amount"]
