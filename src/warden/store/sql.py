"""The SQL implementation of :class:`~warden.store.base.Store` (SQLAlchemy 2 Core).

SQLite is the embedded default: WAL journal, ``synchronous=FULL`` unless told
otherwise (``NORMAL`` survives a process crash but not power loss), writes under
``BEGIN IMMEDIATE`` so two writers never deadlock. The schema is created and
upgraded by Alembic (:func:`upgrade`), never by ``create_all``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from warden.errors import (
    ConfigError,
    HeadMoved,
    ReplayDetected,
    SessionRefused,
    StoreUnavailable,
)
from warden.store.base import ReplayKeys, SessionState
from warden.store.schema import entries, replay_keys, sessions

SYNC_MODES = ("FULL", "NORMAL", "EXTRA")


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
    """Sessions, replay keys and chained entries in one SQL database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock() if engine.dialect.name == "sqlite" else None

    @property
    def engine(self) -> Engine:
        return self._engine

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            if self._lock is not None:
                with self._lock, self._engine.begin() as conn:
                    yield conn
            else:
                with self._engine.begin() as conn:
                    yield conn
        except sa_exc.IntegrityError:
            raise
        except sa_exc.SQLAlchemyError as exc:
            raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc

    @staticmethod
    def _replay_rows(session_id: str, replay: ReplayKeys) -> list[dict[str, Any]]:
        now = _now()
        rows = [
            {
                "session_id": session_id,
                "kind": "request_id",
                "value": replay.request_id,
                "seen_at": now,
            }
        ]
        if replay.nonce is not None:
            rows.append(
                {"session_id": session_id, "kind": "nonce", "value": replay.nonce, "seen_at": now}
            )
        return rows

    def _insert_replay(self, conn: Connection, session_id: str, replay: ReplayKeys) -> None:
        try:
            with conn.begin_nested():
                conn.execute(insert(replay_keys), self._replay_rows(session_id, replay))
        except sa_exc.IntegrityError as exc:
            raise ReplayDetected("duplicate request_id or nonce") from exc

    def create_session(self, state: SessionState, replay: ReplayKeys) -> None:
        try:
            with self._tx() as conn:
                self._insert_replay(conn, state.session_id, replay)
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(sessions).values(
                                session_id=state.session_id,
                                agent_id=state.agent_id,
                                key_id=state.key_id,
                                created_at=state.created_at,
                                negotiated=_dumps(state.negotiated),
                                closed=False,
                                head_seq=-1,
                                head_hash=None,
                                head_signature=None,
                            )
                        )
                except sa_exc.IntegrityError as exc:
                    raise SessionRefused(
                        "session already negotiated", reason="renegotiation_not_supported"
                    ) from exc
        except sa_exc.IntegrityError as exc:  # pragma: no cover - mapped above
            raise StoreUnavailable("unexpected constraint failure") from exc

    def load_session(self, session_id: str) -> SessionState | None:
        try:
            with self._engine.connect() as conn:
                row = conn.execute(
                    select(sessions).where(sessions.c.session_id == session_id)
                ).first()
        except sa_exc.SQLAlchemyError as exc:
            raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
        if row is None:
            return None
        return SessionState(
            session_id=row.session_id,
            agent_id=row.agent_id,
            key_id=row.key_id,
            created_at=row.created_at,
            negotiated=json.loads(row.negotiated),
            closed=bool(row.closed),
            head_seq=row.head_seq,
            head_hash=row.head_hash,
        )

    def seen(self, session_id: str, replay: ReplayKeys) -> bool:
        conds = [(replay_keys.c.kind == "request_id") & (replay_keys.c.value == replay.request_id)]
        if replay.nonce is not None:
            conds.append((replay_keys.c.kind == "nonce") & (replay_keys.c.value == replay.nonce))
        from sqlalchemy import or_

        try:
            with self._engine.connect() as conn:
                row = conn.execute(
                    select(replay_keys.c.kind)
                    .where(replay_keys.c.session_id == session_id)
                    .where(or_(*conds))
                    .limit(1)
                ).first()
        except sa_exc.SQLAlchemyError as exc:
            raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
        return row is not None

    def record_replay(self, session_id: str, replay: ReplayKeys) -> None:
        with self._tx() as conn:
            self._insert_replay(conn, session_id, replay)

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
        seq = expected_seq + 1
        with self._tx() as conn:
            if replay is not None:
                self._insert_replay(conn, session_id, replay)
            values: dict[str, Any] = {
                "head_seq": seq,
                "head_hash": entry["entry_hash"],
                "head_signature": _dumps(head_signature),
            }
            if close:
                values["closed"] = True
            moved = conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id)
                .where(sessions.c.head_seq == expected_seq)
                .values(**values)
            )
            if moved.rowcount != 1:
                raise HeadMoved(f"session {session_id} head is no longer seq {expected_seq}")
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(entries).values(
                            session_id=session_id,
                            seq=seq,
                            entry_hash=entry["entry_hash"],
                            step_id=str(entry.get("step_id", "")),
                            step_type=str(entry.get("step_type", "")),
                            entry=_dumps(entry),
                            response=_dumps(response) if response is not None else None,
                            created_at=_now(),
                        )
                    )
            except sa_exc.IntegrityError as exc:
                raise HeadMoved(f"entry seq {seq} of {session_id} already exists") from exc

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
        self._engine.dispose()


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
