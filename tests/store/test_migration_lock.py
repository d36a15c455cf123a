"""PostgreSQL replicas that start together migrate one at a time (an advisory lock in the
migration's transaction). The lock is per schema, so Wardens in other schemas of one
database do not wait for each other, and a replica waits for another's migration longer
than a row lock's ``lock_timeout``: a slow migration is not a locked database."""

from __future__ import annotations

import threading

import psycopg
from conftest import _libpq_url, postgres_schema

from warden.store import open_store
from warden.store.sql import MIGRATION_LOCK_SQL, current_revision, head_revision


def _hold_migration_lock(url: str, release: threading.Event, held: threading.Event) -> None:
    """Take the migration lock on ``url``'s schema, as a replica migrating it would."""
    schema = url.split("search_path%3D")[-1]
    with psycopg.connect(_libpq_url(url), options=f"-csearch_path={schema}") as conn:
        conn.execute(MIGRATION_LOCK_SQL)
        held.set()
        release.wait(30)
        conn.rollback()


def test_a_migration_in_another_schema_does_not_hold_this_one_up() -> None:
    with postgres_schema() as busy, postgres_schema() as free:
        release, held = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_migration_lock, args=(busy, release, held))
        holder.start()
        try:
            assert held.wait(30)
            # 200 ms is all a row lock may wait; the other schema's lock is not this one's.
            open_store(free, lock_timeout_ms=200).close()
            assert current_revision(free) == head_revision()
            assert current_revision(busy) is None
        finally:
            release.set()
            holder.join(30)


def test_a_replica_waits_out_another_replicas_migration() -> None:
    with postgres_schema() as url:
        release, held = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_migration_lock, args=(url, release, held))
        holder.start()
        try:
            assert held.wait(30)
            # The "other replica" finishes after several row-lock timeouts (200 ms each).
            threading.Timer(1.5, release.set).start()
            store = open_store(url, lock_timeout_ms=200)
            store.close()
            assert release.is_set()  # it waited for the migration rather than failing
            assert current_revision(url) == head_revision()
        finally:
            release.set()
            holder.join(30)
