"""The SQL implementation of :class:`~warden.store.base.Store` (SQLAlchemy 2 Core).

SQLite is the embedded default: WAL journal, ``synchronous=FULL`` unless told
otherwise (``NORMAL`` survives a process crash but not power loss), writes under
``BEGIN IMMEDIATE`` so two writers never deadlock. The schema is created and
upgraded by Alembic (:func:`upgrade`), never by ``create_all``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from warden.errors import (
    ConfigError,
    HeadMoved,
    ReplayDetected,
    SessionRefused,
    StoreUnavailable,
    WardenError,
)
from warden.store.base import PendingAppend, ReplayKeys, SessionState
from warden.store.schema import entries, replay_keys, sessions

SYNC_MODES = ("FULL", "NORMAL", "EXTRA")
_CACHE_SIZE = 10_000
log = logging.getLogger(__name__)


def _is_integrity(exc: BaseException) -> bool:
    """A unique/primary-key violation from any DB-API driver."""
    return type(exc).__name__ == "IntegrityError" or isinstance(exc, sa_exc.IntegrityError)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _sqlite_engine(url: str, sync: str) -> Engine:
    parsed = make_url(url)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE can be issued.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={sync}")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def upgrade(engine: Engine) -> None:
    """Run the Alembic migrations to ``head`` on ``engine``."""
    cfg = Config()
    cfg.set_main_option(
        "script_location", str(resources.files("warden.store").joinpath("migrations"))
    )
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class SqlStore:
    """Sessions, replay keys and chained entries in one SQL database.

    The per-step path (load session, record replay keys, append) runs on one
    DB-API connection with prepared SQL, because SQLAlchemy's statement
    overhead is larger than the work itself; export, counts and migrations use
    SQLAlchemy Core. Session states are cached in memory and the cache is only
    a hint: ``append`` commits conditionally on the stored head, so a stale
    cache yields ``HeadMoved`` (and the caller reloads with ``fresh=True``).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.RLock()
        self._raw: Any = engine.raw_connection()
        self._qmark = engine.dialect.paramstyle == "qmark"
        self._cache: dict[str, SessionState] = {}
        self._checkpointer: _Checkpointer | None = None
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            # Checkpoint the WAL off the request path: an automatic checkpoint runs
            # inside the committing request and is the largest latency tail.
            cur = self._raw.cursor()
            cur.execute("PRAGMA wal_autocheckpoint=0")
            cur.close()
            self._checkpointer = _Checkpointer(engine)

    @property
    def engine(self) -> Engine:
        return self._engine

    def _q(self, sql: str) -> str:
        return sql if self._qmark else sql.replace("?", "%s")

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction on the raw connection; foreign errors translated."""
        with self._lock:
            cur = self._raw.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE" if self._qmark else "BEGIN")
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:
                try:
                    cur.execute("ROLLBACK")
                except Exception:  # noqa: BLE001 - the original error matters more
                    log.exception("rollback failed")
                if isinstance(exc, WardenError | KeyboardInterrupt | SystemExit):
                    raise
                if _is_integrity(exc):
                    raise StoreUnavailable(f"unexpected constraint failure: {exc}") from exc
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}: {exc}") from exc
            finally:
                cur.close()

    @staticmethod
    def _replay_rows(session_id: str, replay: ReplayKeys) -> list[tuple[str, str, str, str]]:
        now = _now()
        rows = [(session_id, "request_id", replay.request_id, now)]
        if replay.nonce is not None:
            rows.append((session_id, "nonce", replay.nonce, now))
        return rows

    def _insert_replay(self, cur: Any, session_id: str, replay: ReplayKeys) -> None:
        try:
            cur.executemany(
                self._q(
                    "INSERT INTO replay_keys (session_id, kind, value, seen_at) VALUES (?, ?, ?, ?)"
                ),
                self._replay_rows(session_id, replay),
            )
        except Exception as exc:
            if _is_integrity(exc):
                raise ReplayDetected("duplicate request_id or nonce") from exc
            raise

    def create_session(self, state: SessionState, replay: ReplayKeys) -> None:
        with self._write() as cur:
            self._insert_replay(cur, state.session_id, replay)
            try:
                cur.execute(
                    self._q(
                        "INSERT INTO sessions (session_id, agent_id, key_id, created_at, "
                        "negotiated, closed, head_seq) VALUES (?, ?, ?, ?, ?, ?, -1)"
                    ),
                    (
                        state.session_id,
                        state.agent_id,
                        state.key_id,
                        state.created_at,
                        _dumps(state.negotiated),
                        False,
                    ),
                )
            except Exception as exc:
                if _is_integrity(exc):
                    raise SessionRefused(
                        "session already negotiated", reason="renegotiation_not_supported"
                    ) from exc
                raise
        self._cache[state.session_id] = replace(state, closed=False, head_seq=-1, head_hash=None)

    def load_session(self, session_id: str, *, fresh: bool = False) -> SessionState | None:
        if not fresh:
            hit = self._cache.get(session_id)
            if hit is not None:
                return hit
        with self._lock:
            cur = self._raw.cursor()
            try:
                cur.execute(
                    self._q(
                        "SELECT session_id, agent_id, key_id, created_at, negotiated, closed, "
                        "head_seq, head_hash FROM sessions WHERE session_id = ?"
                    ),
                    (session_id,),
                )
                row = cur.fetchone()
            except Exception as exc:
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
            finally:
                cur.close()
        if row is None:
            self._cache.pop(session_id, None)
            return None
        state = SessionState(
            session_id=row[0],
            agent_id=row[1],
            key_id=row[2],
            created_at=row[3],
            negotiated=json.loads(row[4]),
            closed=bool(row[5]),
            head_seq=int(row[6]),
            head_hash=row[7],
        )
        self._cache[session_id] = state
        if len(self._cache) > _CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        return state

    def seen(self, session_id: str, replay: ReplayKeys) -> bool:
        with self._lock:
            cur = self._raw.cursor()
            try:
                values = [replay.request_id]
                sql = (
                    "SELECT 1 FROM replay_keys WHERE session_id = ? "
                    "AND ((kind = 'request_id' AND value = ?)"
                )
                if replay.nonce is not None:
                    sql += " OR (kind = 'nonce' AND value = ?)"
                    values.append(replay.nonce)
                cur.execute(self._q(sql + ") LIMIT 1"), (session_id, *values))
                return cur.fetchone() is not None
            except Exception as exc:
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
            finally:
                cur.close()

    def record_replay(self, session_id: str, replay: ReplayKeys) -> None:
        with self._write() as cur:
            self._insert_replay(cur, session_id, replay)

    def append(
        self,
        session_id: str,
        *,
        expected_seq: int,
        entry: dict[str, Any],
        response: dict[str, Any] | None,
        head_signature: dict[str, Any],
        replay: ReplayKeys | None,
        close: bool = False,
    ) -> None:
        (error,) = self.append_many(
            [
                PendingAppend(
                    session_id, expected_seq, entry, response, head_signature, replay, close
                )
            ]
        )
        if error is not None:
            raise error

    def append_many(self, items: list[PendingAppend]) -> list[Exception | None]:
        outcomes: list[Exception | None] = []
        with self._write() as cur:
            for i, item in enumerate(items):
                # A savepoint per item: one replay or lost race fails alone.
                savepoint = f"item{i}"
                cur.execute(f"SAVEPOINT {savepoint}")
                try:
                    self._append_one(cur, item)
                except (HeadMoved, ReplayDetected) as exc:
                    cur.execute(f"ROLLBACK TO {savepoint}")
                    cur.execute(f"RELEASE {savepoint}")
                    outcomes.append(exc)
                    continue
                cur.execute(f"RELEASE {savepoint}")
                outcomes.append(None)
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is None:
                self._advance_cache(item)
            elif isinstance(outcome, HeadMoved):
                self._cache.pop(item.session_id, None)
        return outcomes

    def _append_one(self, cur: Any, item: PendingAppend) -> None:
        seq = item.expected_seq + 1
        if item.replay is not None:
            self._insert_replay(cur, item.session_id, item.replay)
        cur.execute(
            self._q(
                "UPDATE sessions SET head_seq = ?, head_hash = ?, head_signature = ?, "
                "closed = (closed OR ?) WHERE session_id = ? AND head_seq = ?"
            ),
            (
                seq,
                item.entry["entry_hash"],
                _dumps(item.head_signature),
                bool(item.close),
                item.session_id,
                item.expected_seq,
            ),
        )
        if cur.rowcount != 1:
            raise HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")
        try:
            cur.execute(
                self._q(
                    "INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, "
                    "entry, response, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    item.session_id,
                    seq,
                    item.entry["entry_hash"],
                    str(item.entry.get("step_id", "")),
                    str(item.entry.get("step_type", "")),
                    _dumps(item.entry),
                    _dumps(item.response) if item.response is not None else None,
                    _now(),
                ),
            )
        except Exception as exc:
            if _is_integrity(exc):
                raise HeadMoved(f"entry seq {seq} of {item.session_id} already exists") from exc
            raise

    def _advance_cache(self, item: PendingAppend) -> None:
        with self._lock:
            cached = self._cache.get(item.session_id)
            if cached is not None and cached.head_seq == item.expected_seq:
                self._cache[item.session_id] = replace(
                    cached,
                    head_seq=item.expected_seq + 1,
                    head_hash=item.entry["entry_hash"],
                    closed=cached.closed or item.close,
                )

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]:
        with self._engine.connect() as conn:
            q = select(sessions).order_by(sessions.c.created_at, sessions.c.session_id)
            if session_id is not None:
                q = q.where(sessions.c.session_id == session_id)
            for s in conn.execute(q).all():
                yield {
                    "kind": "session",
                    "session_id": s.session_id,
                    "agent_id": s.agent_id,
                    "key_id": s.key_id,
                    "created_at": s.created_at,
                }
                rows = conn.execute(
                    select(entries.c.seq, entries.c.entry, entries.c.response)
                    .where(entries.c.session_id == s.session_id)
                    .order_by(entries.c.seq)
                )
                for r in rows:
                    rec: dict[str, Any] = {
                        "kind": "entry",
                        "session_id": s.session_id,
                        "seq": r.seq,
                        "entry": json.loads(r.entry),
                    }
                    if r.response is not None:
                        rec["response"] = json.loads(r.response)
                    yield rec
                if s.head_seq >= 0:
                    yield {
                        "kind": "head",
                        "session_id": s.session_id,
                        "seq": s.head_seq,
                        "chain_hash": s.head_hash,
                        "signature": json.loads(s.head_signature or "null"),
                    }

    def counts(self) -> dict[str, int]:
        with self._engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in (sessions, replay_keys, entries)
            }

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._lock:
            try:
                self._raw.close()
            finally:
                self._engine.dispose()


class _Checkpointer:
    """A daemon thread that checkpoints the SQLite WAL (PASSIVE) every ``interval`` s."""

    def __init__(self, engine: Engine, interval: float = 0.25) -> None:
        self._engine = engine
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="warden-wal-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: Any = self._engine.raw_connection()
        try:
            while not self._stop.wait(self._interval):
                try:
                    conn.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except Exception:  # noqa: BLE001 - a failed checkpoint is retried next tick
                    log.warning("WAL checkpoint failed", exc_info=True)
            conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            log.warning("final WAL checkpoint failed", exc_info=True)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def open_store(url: str, *, sqlite_sync: str = "FULL", migrate: bool = True) -> SqlStore:
    """Open (and by default migrate) the store at ``url``.

    ``sqlite:///path/to/warden.db`` is the embedded default. Raises
    :class:`ConfigError` for an unsupported URL or sync mode.
    """
    sync = sqlite_sync.upper()
    if sync not in SYNC_MODES:
        raise ConfigError(f"sqlite sync mode must be one of {SYNC_MODES}, got {sqlite_sync!r}")
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise ConfigError(f"invalid database URL {url!r}") from exc
    if parsed.get_backend_name() != "sqlite":
        raise ConfigError(
            f"database backend {parsed.get_backend_name()!r} is not supported yet; use sqlite:///…"
        )
    engine = _sqlite_engine(url, sync)
    if migrate:
        upgrade(engine)
    return SqlStore(engine)
