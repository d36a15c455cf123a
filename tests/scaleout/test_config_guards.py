"""What keeps a misconfigured replica out: another key file, a database that hangs, a
budgets file loaded by several replicas at once (both backends where it applies)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_POLICY, write_key
from fastapi.testclient import TestClient

from warden.crypto.hmac_keys import SessionKeys
from warden.errors import ConfigError
from warden.ledger.ledger import Ledger
from warden.runtime import Runtime
from warden.server import app as server_app
from warden.settings import Settings
from warden.spend import Budget, BudgetKind, Period, SpendEngine
from warden.spend.audit import SpendAuditor
from warden.store import open_store


def test_a_replica_with_another_key_file_is_refused(
    make_backend_runtime: Callable[..., Runtime], database_url: str, tmp_path: Path
) -> None:
    first = make_backend_runtime()
    other = tmp_path / "other"
    key = write_key(other / "ikm.key", bytes(range(1, 33)))
    with pytest.raises(ConfigError, match="another key file"):
        Runtime.start(
            Settings(data_dir=other, policy=DEFAULT_POLICY, key_file=key, database_url=database_url)
        )
    # The database is untouched by the refused start: the first replica keeps working.
    assert first.store.counts()["sessions"] >= 0
    second = make_backend_runtime()  # same key file as the first: accepted
    assert second.store is not first.store


def _engine(url: str) -> tuple[SpendEngine, Any]:
    store = open_store(url)
    return SpendEngine(
        store, SpendAuditor(Ledger(store, SessionKeys(bytes(range(32))), "w"))
    ), store


def test_the_same_budget_defined_by_two_replicas_at_once_is_recorded_once(
    database_url: str,
) -> None:
    engines = [_engine(database_url), _engine(database_url)]
    budget = Budget("acme", BudgetKind.ORG, "USD", Decimal("100"), Period.NONE)
    barrier = threading.Barrier(2)

    def define(e: SpendEngine) -> None:
        barrier.wait()
        e.define_budget(budget)

    try:
        threads = [threading.Thread(target=define, args=(e,)) for e, _ in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        engines[0][0].define_budget(budget)  # a restart with the same file: no entry either
        store = engines[0][1]
        kinds = [r["entry"]["step_type"] for r in store.iter_records() if r["kind"] == "entry"]
        assert kinds.count("warden/spend.budget") == 1
        engines[1][0].define_budget(
            Budget("acme", BudgetKind.ORG, "USD", Decimal("90"), Period.NONE)
        )
        kinds = [r["entry"]["step_type"] for r in store.iter_records() if r["kind"] == "entry"]
        assert kinds.count("warden/spend.budget") == 2  # a real change is recorded
    finally:
        for _, s in engines:
            s.close()


def test_readyz_answers_unavailable_when_the_database_hangs(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_app, "READY_TIMEOUT_S", 0.2)
    release = threading.Event()
    real_ping = runtime.store.ping

    def hanging_ping() -> None:
        release.wait(5)

    monkeypatch.setattr(runtime.store, "ping", hanging_ping)
    with TestClient(server_app.create_app(runtime)) as client:
        hung = client.get("/readyz")
        assert hung.status_code == 503
        assert hung.json() == {"status": "unavailable", "reason": "store_timeout"}
        assert client.get("/healthz").status_code == 200  # the loop was never blocked
        release.set()
        monkeypatch.setattr(runtime.store, "ping", real_ping)
        assert client.get("/readyz").status_code == 200
