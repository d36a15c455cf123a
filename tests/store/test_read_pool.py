"""PostgreSQL reads on the decision path use a pool of their own (issue 16 item 4).

``database_pool_size`` sizes it; a read through ``SqlStore.reading`` does not queue
behind a write transaction held open on the store's writing connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from conftest import asset, postgres_schema, service_client

from warden.runtime import Runtime

DESK = asset("approvals/desk.yaml")


def test_the_setting_sizes_the_read_pool(make_backend_runtime: Callable[..., Runtime]) -> None:
    rt = make_backend_runtime(DESK, database_pool_size=2)
    reads = rt.store._reads  # noqa: SLF001 - the pool under test
    if rt.store.row_locks:
        assert reads is not None and reads.pool.size() == 2  # type: ignore[attr-defined]
    else:
        assert reads is None  # SQLite: one connection, reads take no write lock


@pytest.fixture
def pg_runtime(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    """A runtime on a fresh PostgreSQL schema (SQLite has one connection per process)."""
    with postgres_schema() as url:
        yield make_runtime(DESK, database_url=url)


def test_a_read_does_not_wait_for_a_write_in_flight(pg_runtime: Runtime) -> None:
    rt = pg_runtime
    agent = service_client(rt, agent_id="agent-7")
    agent.hello()
    first = agent.tool_call("delete_file", {"path": "/srv/a"})["result"]
    assert first["decision"] == "ask"
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with rt.store._write():  # noqa: SLF001 - hold the writing connection's transaction
            holding.set()
            release.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert holding.wait(10)
        found: list[object] = []

        def peek() -> None:
            with rt.store.reading() as view:
                found.append(view.tasks.latest_state(agent.session_id, "x" * 64))

        reader = threading.Thread(target=peek)
        reader.start()
        reader.join(10)
        # The read finished while the write transaction was still open.
        assert not reader.is_alive() and release.is_set() is False
        assert found == [None]
    finally:
        release.set()
        t.join(30)
