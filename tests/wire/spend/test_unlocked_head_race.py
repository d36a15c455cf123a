"""Decision 800 on PostgreSQL: a spend quote and a KLA action request chain their entry on
a head read WITHOUT a lock (sent with ``BEGIN``) and lock it only when they append. Here
another replica appends to the same chain between that read and the append: the first
attempt's commit is refused (nothing of it is written: no hold, no idempotency answer,
no records, no log leaf, no observer report), the operation runs again from the start
with the head locked, and both writers' entries chain one after the other, as
``warden verify`` checks them (every chain, the transparency log without a gap).

PostgreSQL only: on SQLite the write transaction is the one writer (``BEGIN
IMMEDIATE``), no head is read without it and the other replica could not write in
between; its quotes and action requests are the rest of tests/wire/spend and tests/kla.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from shutil import copy2
from typing import Any

import pytest
from conftest import ensure_agent, postgres_schema
from spend_wire_helpers import Api, db_rows, open_api

from warden.cli_ledger import verify_chains
from warden.identity.api_keys import Role
from warden.kla.evidence import execution_session_id
from warden.runtime import Runtime
from warden.spend import Budget, BudgetKind, Period
from warden.spend.audit import spend_session_id
from warden.store.spend_sql import SqlSpendTx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kla"))
from kla_wire_helpers import BASIC, load  # noqa: E402


@pytest.fixture
def database_url() -> Iterator[str]:
    """PostgreSQL only (see the module doc): both replicas share this schema."""
    with postgres_schema() as url:
        yield url


@pytest.fixture
def replicas(
    make_backend_runtime: Callable[..., Runtime], tmp_path: Path
) -> tuple[Runtime, Runtime]:
    """Two replicas of one deployment: one database, and the second started with the
    first's keys (the IKM is the tests' own; the log's checkpoint key and the signing
    keys copied), as replicas share them."""
    first = make_backend_runtime()
    shared = tmp_path / "data1"
    shared.mkdir()
    for name in ("checkpoint.key", "signing.key", "mldsa.key"):
        copy2(first.settings.data_dir / name, shared / name)
    return first, make_backend_runtime()


def _move_between(
    monkeypatch: pytest.MonkeyPatch, move: Callable[[str], None]
) -> list[tuple[str, tuple[int, str | None] | None]]:
    """The first time a transaction is answered a chain head it read without a lock,
    ``move(session_id)`` runs another replica's write on that chain (committed) before
    the caller chains its entry on the head it was answered. Returns what was moved:
    (session id, the stale head)."""
    original = SqlSpendTx.session_head
    moved: list[tuple[str, tuple[int, str | None] | None]] = []

    def session_head(self: SqlSpendTx, session_id: str) -> tuple[int, str | None] | None:
        unlocked = session_id in self._seen  # noqa: SLF001 - the read under test
        head = original(self, session_id)
        if unlocked and not moved:
            moved.append((session_id, head))
            move(session_id)
        return head

    monkeypatch.setattr(SqlSpendTx, "session_head", session_head)
    return moved


def _observed(rt: Runtime) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    rt.guardian.observers.add(lambda wire, decision, _rule, _s: seen.append((wire, decision)))
    return seen


def _entries(rt: Runtime, sid: str) -> list[dict[str, Any]]:
    return [r for r in rt.store.iter_records(sid) if r["kind"] == "entry"]


def _verified(rt: Runtime, url: str) -> dict[str, Any]:
    """``warden verify`` over the whole database: every chain (hashes, links, signed
    heads and sessions with the IKM) and the transparency log (no index gap)."""
    check = verify_chains(
        None,
        data_dir=rt.settings.data_dir,
        database_url=url,
        key_file=None,
        no_signatures=False,
    )
    assert check.ok, check.document
    return check.document


def _linked(entries: list[dict[str, Any]]) -> list[str]:
    """Every entry of a chain at its seq, each on the one before it; their step types."""
    assert [e["seq"] for e in entries] == list(range(len(entries)))
    for before, entry in zip(entries, entries[1:], strict=False):
        assert entry["entry"]["previous_hash"] == before["entry"]["entry_hash"]
    return [e["entry"]["step_type"] for e in entries]


def test_a_quote_whose_spend_chain_moved_is_run_again_locked(
    replicas: tuple[Runtime, Runtime],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    here, elsewhere = replicas
    ensure_agent(here, "bot-1", Role.AGENT)
    _, token = here.api_keys.create("bot-1", Role.AGENT)
    here.spend.define_budget(
        Budget("b", BudgetKind.ORG, "USD", Decimal(1000), Period.NONE, principals=("bot-1",))
    )
    sid = spend_session_id("b")
    seen = _observed(here)
    for api in open_api(here):
        api = Api(api.client, token)
        assert (
            api.quote("b", "5", key="first-quote-key-0001").status == 200
        )  # learns the budget's path
        before = len(_entries(here, sid))

        def move(session_id: str) -> None:
            assert session_id == sid
            # Another replica's operation on the same budget tree's chain, committed.
            elsewhere.spend.define_budget(
                Budget("b-team", BudgetKind.TEAM, "USD", Decimal(10), Period.NONE, "b")
            )

        moved = _move_between(monkeypatch, move)
        with caplog.at_level(logging.INFO, logger="warden.ledger.warden_chain"):
            r = api.quote("b", "7", key="raced-quote-key-0001")
        assert r.status == 200, r.body
        assert [m[0] for m in moved] == [sid]  # the head moved between read and append
        stale = _entries(here, sid)[before - 1]["entry"]["entry_hash"]
        assert moved[0][1] == (before - 1, stale)  # what the first attempt chained on
        retried = [m for m in caplog.messages if "running again locked" in m]
        assert len(retried) == 1, caplog.messages
        # Replayed with the same key: the stored answer, once.
        again = api.quote("b", "7", key="raced-quote-key-0001")
        assert again.status == 200 and again.body["replayed"] is True
        assert again.data["quote"] == r.data["quote"]
    entries = _entries(here, sid)
    assert len(entries) == before + 2  # the other replica's entry, then the quote's
    # The other replica's entry, then the quote's on top of it.
    assert _linked(entries)[before:] == ["warden/spend.budget", "warden/spend.reserve"]
    held = r.data["quote"]["reservation"]["reservationId"]
    assert entries[-1]["entry"]["spend"]["reservation_id"] == held
    # One hold of 7 and one of 5: the refused attempt's hold was rolled back.
    assert db_rows(here, "SELECT count(*) FROM reservations")[0][0] == 2
    reserved = db_rows(here, "SELECT reserved FROM budget_usage WHERE budget_id = 'b'")
    assert [Decimal(row[0]) for row in reserved] == [Decimal(12)]
    assert db_rows(here, "SELECT count(*) FROM idempotency_keys")[0][0] == 2
    # Reported once per quote, after its commit: never for the attempt that rolled back.
    assert [s for s in seen if s[0] == "spend"] == [("spend", "allow"), ("spend", "allow")]
    _verified(here, database_url)


def test_an_action_request_whose_execution_chain_moved_is_run_again_locked(
    replicas: tuple[Runtime, Runtime],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    here, elsewhere = replicas
    ensure_agent(here, "bot-1", Role.AGENT)
    _, token = here.api_keys.create("bot-1", Role.AGENT)
    execution = f"exec_race_{uuid.uuid4().hex[:12]}"
    sid = execution_session_id(execution)
    seen = _observed(here)

    def record() -> dict[str, Any]:
        base = load(BASIC)
        return {
            **base,
            "action_request_id": f"req_race_{uuid.uuid4().hex}",
            "correlation": {**base["correlation"], "execution_id": execution},
        }

    def submit(api: Api, body: dict[str, Any]) -> Any:
        return api.client.post(
            "/v1/action-requests", json=body, headers={"Authorization": f"Bearer {token}"}
        )

    for api in open_api(here):
        first = submit(api, record())
        assert first.status_code == 200, first.text
        before = len(_entries(here, sid))
        assert before == 2  # the request and its decision

        def move(session_id: str) -> None:
            assert session_id == sid
            # Another replica's action request in the same execution, committed.
            for other in open_api(elsewhere):
                assert submit(other, record()).status_code == 200

        moved = _move_between(monkeypatch, move)
        raced = record()
        with caplog.at_level(logging.INFO, logger="warden.ledger.warden_chain"):
            r = submit(api, raced)
        assert r.status_code == 200, r.text
        assert [m[0] for m in moved] == [sid]
        retried = [m for m in caplog.messages if "running again locked" in m]
        assert len(retried) == 1, caplog.messages
        again = submit(api, raced)  # the same record again: the stored answer, once
        assert again.status_code == 200 and again.json()["replayed"] is True
        assert again.json()["data"]["decision"] == r.json()["data"]["decision"]
    entries = _entries(here, sid)
    # The other replica's request and decision, then this one's: 2 + 2 + 2.
    assert len(entries) == before + 4
    _linked(entries)
    records = [e["entry"]["kla"] for e in entries[before:]]
    other = records[0]["record_id"]
    assert other != raced["action_request_id"]  # the other replica's request came first
    assert records[2]["record_id"] == raced["action_request_id"]
    assert records[3]["record"]["action_request_id"] == raced["action_request_id"]
    rid = raced["action_request_id"]
    rows = db_rows(here, f"SELECT count(*) FROM kla_records WHERE action_request_id = '{rid}'")
    assert rows[0][0] == 2  # its request and decision, written once
    # Reported once per request of this replica, after its commit.
    assert len([s for s in seen if s[0] == "kla"]) == 2
    _verified(here, database_url)
