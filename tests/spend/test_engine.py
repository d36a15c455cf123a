"""The spend engine on both backends (a real SQLite file, a fresh PostgreSQL schema): caps
along the path, Decimal money, settle/release/expiry/undo, periods, every operation in the
audit chain, and no overspend from racing threads or processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from spend_fixtures import close_opened, open_engine, tree, verify

from warden.spend import (
    Budget,
    BudgetExceeded,
    BudgetKind,
    HoldStatus,
    Period,
    ReservationNotHeld,
    SettlementExceedsReservation,
)
from warden.spend.budgets import BudgetError
from warden.spend.errors import AlreadyUndone, UnknownBudget, UnknownReservation
from warden.spend.money import MoneyError, parse_amount


@pytest.fixture(autouse=True)
def _close_stores(database_url: str) -> Iterator[None]:
    """Every test here runs on both backends; its stores close before the database goes."""
    yield
    close_opened()


def test_tightest_budget_on_the_path_refuses_with_limit_and_requested(database_url: str) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng, org="100", team="30", agent="50")  # the team cap is the tightest
    eng.reserve(bot, "20", "USD", action="a")
    with pytest.raises(BudgetExceeded) as info:
        eng.reserve(bot, "10.01", "USD", action="b")
    err = info.value
    assert (err.budget_id, err.available, err.requested, err.cap) == (
        "acme.ops",
        Decimal("10"),
        Decimal("10.01"),
        Decimal("30"),
    )
    assert err.gate == "budget:exceeded"
    eng.reserve(bot, "10", "USD", action="c")  # exactly what is left fits
    assert eng.remaining(bot) == (Decimal("0"), "USD")
    verify(store)


def test_decimal_exactness_no_float_drift(database_url: str) -> None:
    eng, _, _ = open_engine(database_url)
    bot = tree(eng, org="1", team="1", agent="1")
    for _ in range(10):
        eng.reserve(bot, "0.1", "USD", action="dime")  # 10 × 0.1 == 1 exactly
    with pytest.raises(BudgetExceeded):
        eng.reserve(bot, "0.000001", "USD", action="one more")


@pytest.mark.parametrize(
    "amount",
    [
        0.1,
        True,
        "abc",
        "-1",
        "NaN",
        "1e400",
        "0.0000001",
        None,
        "1_0",
        "\uff11",
        "\u0663",
        " 1 ",
        "+1",
        ".5",
        "1.",
        "1e0",
    ],
)
def test_bad_amounts_are_refused_and_nothing_is_held(database_url: str, amount: object) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng)
    before = store.counts()
    with pytest.raises(MoneyError):
        eng.reserve(bot, amount, "USD", action="x")
    assert store.counts() == before
    assert eng.remaining(bot) == (Decimal("50"), "USD")


def test_currencies_never_mix(database_url: str) -> None:
    eng, _, _ = open_engine(database_url)
    bot = tree(eng, currency="EUR")
    with pytest.raises(MoneyError) as info:
        eng.reserve(bot, "1", "USD", action="x")
    assert info.value.reason == "currency_mismatch"
    with pytest.raises(BudgetError):
        eng.define_budget(
            Budget("acme.usd", BudgetKind.TEAM, "USD", Decimal(5), Period.NONE, parent_id="acme")
        )


def test_settle_charges_actual_and_releases_the_rest(database_url: str) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng)
    res = eng.reserve(bot, "40", "USD", action="buy")
    receipt = eng.settle(res.id, "12.34")
    assert receipt.amount == Decimal("12.34")
    assert eng.remaining(bot) == (Decimal("37.66"), "USD")
    assert eng.reservation(res.id).status is HoldStatus.SETTLED
    with pytest.raises(ReservationNotHeld):
        eng.settle(res.id, "1")
    with pytest.raises(ReservationNotHeld):
        eng.release(res.id)
    verify(store)


def test_settlement_above_the_hold_is_refused_flagged_and_keeps_the_hold(database_url: str) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng)
    res = eng.reserve(bot, "10", "USD", action="buy")
    with pytest.raises(SettlementExceedsReservation):
        eng.settle(res.id, "10.01")
    assert eng.reservation(res.id).status is HoldStatus.HELD
    assert eng.remaining(bot) == (Decimal("40"), "USD")
    flagged = [
        r
        for r in store.iter_records()
        if r["kind"] == "entry" and r["entry"]["step_type"] == "warden/spend.settle_refused"
    ]
    assert len(flagged) == 1 and flagged[0]["entry"]["spend"]["flagged"] is True
    verify(store)


def test_release_and_expiry_return_the_hold(database_url: str) -> None:
    eng, store, clock = open_engine(database_url)
    bot = tree(eng)
    a = eng.reserve(bot, "20", "USD", action="a", hold_seconds=60)
    b = eng.reserve(bot, "20", "USD", action="b", hold_seconds=600)
    eng.release(a.id, reason="tool failed")
    assert eng.remaining(bot) == (Decimal("30"), "USD")
    clock.advance(seconds=601)
    assert eng.expire_due() == 1
    assert eng.reservation(b.id).status is HoldStatus.EXPIRED
    assert eng.remaining(bot) == (Decimal("50"), "USD")
    with pytest.raises(ReservationNotHeld):
        eng.settle(b.id, "1")
    kinds = [r["entry"]["step_type"] for r in store.iter_records() if r["kind"] == "entry"]
    assert kinds.count("warden/spend.expire") == 1 and kinds.count("warden/spend.release") == 1
    verify(store)


def test_two_replicas_expiring_at_once_release_each_hold_once(database_url: str) -> None:
    eng, store, clock = open_engine(database_url)
    bot = tree(eng, org="1000", team="1000", agent="1000")
    holds = [eng.reserve(bot, "3", "USD", action=f"h{i}", hold_seconds=60) for i in range(40)]
    clock.advance(seconds=61)
    # Two handles on one database, as two replicas' expiry sweepers are.
    engines = [eng, open_engine(database_url, clock)[0]]
    barrier = threading.Barrier(2)
    released: list[int] = []

    def sweep(e: Any) -> None:
        barrier.wait()
        released.append(e.expire_due())

    threads = [threading.Thread(target=sweep, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(released) == 40
    assert eng.remaining(bot) == (Decimal("1000"), "USD")
    assert all(eng.reservation(h.id).status is HoldStatus.EXPIRED for h in holds)
    kinds = [r["entry"]["step_type"] for r in store.iter_records() if r["kind"] == "entry"]
    assert kinds.count("warden/spend.expire") == 40
    verify(store)


def test_expired_holds_do_not_block_a_new_reservation(database_url: str) -> None:
    eng, _, clock = open_engine(database_url)
    bot = tree(eng)
    eng.reserve(bot, "50", "USD", action="a", hold_seconds=30)
    with pytest.raises(BudgetExceeded):
        eng.reserve(bot, "1", "USD", action="b")
    clock.advance(seconds=31)
    eng.reserve(bot, "50", "USD", action="c")  # expiry runs inside the reservation


def test_undo_restores_the_budget_once(database_url: str) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng)
    receipt = eng.settle(eng.reserve(bot, "30", "USD", action="buy").id, "30")
    assert eng.remaining(bot) == (Decimal("20"), "USD")
    eng.undo(receipt.id)
    assert eng.remaining(bot) == (Decimal("50"), "USD")
    with pytest.raises(AlreadyUndone):
        eng.undo(receipt.id)
    verify(store)


def test_daily_period_rolls_at_utc_midnight(database_url: str) -> None:
    eng, _, clock = open_engine(database_url)
    bot = tree(eng, period=Period.DAY)
    clock.now = clock.now.replace(hour=23, minute=59)
    eng.settle(eng.reserve(bot, "50", "USD", action="a").id, "50")
    with pytest.raises(BudgetExceeded):
        eng.reserve(bot, "1", "USD", action="b")
    clock.advance(minutes=1)  # 00:00 UTC next day
    eng.reserve(bot, "50", "USD", action="c")


def test_unknowns(database_url: str) -> None:
    eng, _, _ = open_engine(database_url)
    with pytest.raises(UnknownBudget):
        eng.reserve("nope", "1", "USD", action="x")
    with pytest.raises(UnknownReservation):
        eng.settle("res_nope", "1")
    with pytest.raises(BudgetError):
        eng.define_budget(
            Budget("lonely", BudgetKind.AGENT, "USD", Decimal(1), Period.NONE, parent_id="missing")
        )


def test_holds_survive_a_restart(database_url: str) -> None:
    eng, store, clock = open_engine(database_url)
    bot = tree(eng)
    res = eng.reserve(bot, "45", "USD", action="a")
    store.close()
    eng2, store2, _ = open_engine(database_url, clock)
    assert eng2.remaining(bot) == (Decimal("5"), "USD")
    with pytest.raises(BudgetExceeded):
        eng2.reserve(bot, "6", "USD", action="b")
    eng2.settle(res.id, "45")
    verify(store2)


def test_threads_never_overspend(database_url: str) -> None:
    eng, store, _ = open_engine(database_url)
    bot = tree(eng, org="1000", team="1000", agent="37")
    admitted: list[str] = []
    refused: list[str] = []

    def go() -> None:
        for _ in range(10):
            try:
                admitted.append(eng.reserve(bot, "1", "USD", action="t").id)
            except BudgetExceeded:
                refused.append("x")

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 37 and len(refused) == 43
    assert eng.remaining(bot) == (Decimal("0"), "USD")
    verify(store)


def _proc_reserve(db: str, n: int, out: Any) -> None:
    eng, store, _ = open_engine(db)
    ok = 0
    for _ in range(n):
        try:
            eng.reserve("acme.ops.bot", "2.5", "USD", action="p")
            ok += 1
        except BudgetExceeded:
            pass
    store.close()
    out.put(ok)


def test_processes_never_overspend(database_url: str) -> None:
    db = database_url
    eng, store, _ = open_engine(db)
    bot = tree(eng, org="1000", team="1000", agent="100")  # room for exactly 40 × 2.5
    store.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_proc_reserve, args=(db, 25, q)) for _ in range(4)]
    for p in procs:
        p.start()
    counts = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert sum(counts) == 40
    eng2, store2, _ = open_engine(db)
    assert eng2.remaining(bot) == (Decimal("0"), "USD")
    report = verify(store2)
    entries = [json.dumps(r) for r in store2.iter_records() if r["kind"] == "entry"]
    assert sum('"warden/spend.reserve"' in e for e in entries) == 40
    assert sum('"warden/spend.refused"' in e for e in entries) == 60
    assert report.sessions == 1


def test_trailing_zeros_do_not_count_as_fractional_digits(database_url: str) -> None:
    eng, _, _ = open_engine(database_url)
    bot = tree(eng)
    res = eng.reserve(bot, "1.0000000", "USD", action="x")
    assert res.amount == Decimal(1)
    # Second review (decision 941): held as its shortest spelling, never a 7th digit.
    assert str(res.amount) == "1"
    assert str(eng.reserve(bot, "0.1000000000", "USD", action="x").amount) == "0.1"


def test_a_digit_past_the_sixth_is_refused_however_far_it_is() -> None:
    """A nonzero 34th digit is still a 7th fractional digit (the 28-digit context's
    ``normalize`` rounded it away, accepting the amount and holding all its digits)."""
    with pytest.raises(MoneyError, match="more than 6 fractional digits"):
        parse_amount("123456789012345.000000000000009999")
    assert str(parse_amount("123456789012345.000000000000000000")) == "123456789012345"
