"""The SQL implementation of :class:`~warden.store.base.Store` (SQLAlchemy 2 Core).

SQLite is the embedded default: WAL journal, ``synchronous=FULL`` unless told
otherwise (``NORMAL`` survives a process crash but not power loss), writes under
``BEGIN IMMEDIATE`` so two writers never deadlock. The schema is created and
upgraded by Alembic (:func:`upgrade`), never by ``create_all``. A database file
Warden creates is mode 0600 (its WAL and shared-memory files inherit that), in a
data directory created 0700.

:meth:`SqlStore.iter_records` is what ``warden verify --data-dir`` reads, so it
vouches for what the export format cannot show: every stored JSON column is
parsed strictly (a duplicate key would read differently in SQL), the
denormalized ``entry_hash``/``step_id``/``step_type`` columns must equal the
entry's own members, and no entry may belong to a missing session row.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from warden.approvals.tasks import ApprovalState
from warden.crypto.canonical import parse_strict_json
from warden.errors import (
    ConfigError,
    HeadMoved,
    IntegrityError,
    IntegrityReason,
    KeyRevoked,
    ParseError,
    ReplayDetected,
    SessionRefused,
    StaleRead,
    StoreUnavailable,
    UnlockedHeadMoved,
    WardenError,
)
from warden.json_text import compact_text
from warden.timestamps import utc_micros as _now

if TYPE_CHECKING:
    from alembic.config import Config

    from warden.spend.budgets import Budget
from warden.store.agents_sql import SqlAgents
from warden.store.append_sql import LEAF_AND_ENTRY
from warden.store.base import (
    PendingAppend,
    ReplayKeys,
    SessionSigner,
    SessionState,
    TaskUnchanged,
)
from warden.store.driver_errors import is_integrity
from warden.store.pauses import WritePauses, paced
from warden.store.schema import SCHEMA_REVISION, entries, replay_keys, sessions
from warden.store.spend_sql import SqlSpendTx
from warden.store.tasks_sql import LATEST_OR_GRANT, grant_row

SYNC_MODES = ("FULL", "NORMAL", "EXTRA")
#: A connection execution option: its SQLite transaction only reads (deferred ``BEGIN``).
_READ_ONLY = "warden_read_only"
#: The next leaf index. PostgreSQL: the counter row, locked until COMMIT. SQLite (whose
#: ``BEGIN IMMEDIATE`` already makes the writer alone): one past the largest index stored,
#: read from the two unique indexes, so no page is dirtied for the counter (writing a
#: counter row would add a page to every commit's WAL frame set: measurably slower).
_LOG_LOCK = "SELECT next_index FROM log_state WHERE id = 1 FOR UPDATE"
#: A read guard's task still as read (parameters: task id, updated_at as stored).
_GUARD_HOLDS = "EXISTS (SELECT 1 FROM tasks g WHERE g.task_id = %s AND g.updated_at = %s)"
#: The newest task bound to a guarded action, read only when the guard fails: what
#: ``ApprovalDesk.peek`` reads after a ``StaleRead`` (``SqlTasks.latest_state_or_grant``).
_FOUND = LATEST_OR_GRANT.replace("?", "%s").replace(
    " ORDER BY", " AND NOT " + _GUARD_HOLDS + " ORDER BY"
)
_APPROVED = ApprovalState.APPROVED.value
#: Ends the read-only transaction a failed read guard left open (:meth:`SqlStore._begin`).
_END_DANGLING = "COMMIT"
_LOG_MAX = (
    "SELECT COALESCE(MAX(m), -1) + 1 FROM (SELECT MAX(log_index) AS m FROM entries "
    "UNION ALL SELECT MAX(log_index) FROM log_events)"
)
#: SQLite: a head move's condition that a read guard's task is still as read
#: (parameters: task id, updated_at as read), the SQLite spelling of ``_GUARD_HOLDS``.
_GUARD_HOLDS_SQLITE = " AND " + _GUARD_HOLDS.replace("%s", "?")
_CACHE_SIZE = 10_000
log = logging.getLogger(__name__)


def _dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, byte for byte
    (a stored entry's text is its transparency-log leaf; :mod:`warden.json_text` writes
    it with orjson where the bytes agree, decision 271)."""
    return compact_text(value)


def _private_sqlite_file(database: str) -> None:
    """Create the database file 0600 (and its directory 0700) unless they exist.

    The empty file is created before SQLite opens it, so nothing is ever written
    to a file others can read; SQLite gives the WAL and shm files the same mode.
    """
    path = Path(database)
    try:
        path.parent.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(path.parent, 0o700)  # the umask may have cleared bits, never added
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    os.chmod(path, 0o600)


#: How long a write waits, by default, for a lock another connection holds before the
#: request fails closed (a 503 or a signed deny): SQLite's ``busy_timeout`` and
#: PostgreSQL's ``lock_timeout``, in milliseconds (``database_lock_timeout_ms`` overrides).
DEFAULT_LOCK_TIMEOUT_MS = {"sqlite": 10_000, "postgresql": 5_000}


def _sqlite_engine(parsed: URL, sync: str, lock_timeout_ms: int | None = None) -> Engine:
    if (
        parsed.database
        and parsed.database != ":memory:"
        and not parsed.database.startswith("file:")
    ):
        _private_sqlite_file(parsed.database)
    engine = create_engine(parsed, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE can be issued.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={sync}")
        busy_ms = lock_timeout_ms or DEFAULT_LOCK_TIMEOUT_MS["sqlite"]
        cur.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A walk that only reads (``read_only`` on its connection: verify, export) takes a
        # deferred read transaction: one WAL snapshot that does not hold the write lock,
        # so a server writing beside it does not wait on it (decision 289).
        read_only = conn.get_execution_options().get(_READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


#: PostgreSQL URLs Warden accepts; all are served by psycopg 3.
_PG_DRIVERS = ("postgresql", "postgres", "postgresql+psycopg")


#: Server settings every PostgreSQL connection of Warden's runs with, unless the URL's
#: ``options`` sets them: a replica that freezes mid-transaction (a paused VM, a
#: partition) loses its locks after ``idle_in_transaction_session_timeout`` instead of
#: stalling every other replica, and a request waits at most ``lock_timeout`` for a row
#: (then it is a signed deny; ``database_lock_timeout_ms`` sets it). TCP keepalives find a
#: dead peer within about 30 s.
PG_SESSION_SETTINGS = {
    "lock_timeout": f"{DEFAULT_LOCK_TIMEOUT_MS['postgresql']}ms",
    "idle_in_transaction_session_timeout": "15s",
}
_PG_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def _postgres_engine(parsed: URL, lock_timeout_ms: int | None = None) -> Engine:
    """A psycopg 3 engine. The store's own connection runs in autocommit so that its
    explicit ``BEGIN``/``COMMIT`` are the only transactions (a read never leaves one open)."""
    if parsed.drivername != "postgresql+psycopg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    options = parsed.query.get("options", "")
    if not isinstance(options, str):
        raise ConfigError("the database URL gives options= more than once")
    session = dict(PG_SESSION_SETTINGS)
    if lock_timeout_ms is not None:
        session["lock_timeout"] = f"{int(lock_timeout_ms)}ms"
    extra = [f"-c {k}={v}" for k, v in session.items() if k not in options]
    parsed = parsed.update_query_dict({"options": " ".join([options, *extra]).strip()})
    keepalives = {k: v for k, v in _PG_KEEPALIVES.items() if k not in parsed.query}
    return create_engine(parsed, pool_pre_ping=True, connect_args=keepalives)


def parse_database_url(url: str) -> URL:
    """``url`` parsed. Raises ConfigError — without echoing the URL, which may hold a
    password — for one that cannot be parsed, a PostgreSQL URL with no database name
    (libpq would silently pick one), or a password that was not percent-encoded."""
    try:
        parsed = make_url(url)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise ConfigError(
            "invalid database URL (expected sqlite:///PATH or "
            "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE; percent-encode special "
            "characters in the password)"
        ) from exc
    if parsed.drivername in _PG_DRIVERS:
        # An unencoded '@' followed by a '/' in the password ends the host early and puts
        # the rest (part of the password) in the database name: refused like the host.
        if any(c in (parsed.host or "") for c in "@/") or "@" in (parsed.database or ""):
            raise ConfigError(
                "the database URL's host contains '@' or '/': percent-encode those characters "
                "in the password (@ is %40, / is %2F), or give the password in PGPASSWORD"
            )
        if not parsed.database:
            raise ConfigError(
                "the PostgreSQL URL names no database: postgresql://USER@HOST:PORT/DATABASE "
                "(use a database of Warden's own)"
            )
    return parsed


def _open_failure(shown: str, detail: BaseException) -> StoreUnavailable:
    """What a database that cannot be opened is called: unreachable, refused, damaged."""
    name = type(detail).__name__
    if name == "LockNotAvailable" or (name == "OperationalError" and _locked(detail)):
        # Reached, not refused: another process holds the write lock past the lock timeout.
        return StoreUnavailable(
            f"the database {shown} is locked by another process (waited for it in vain: "
            f"{name}: {detail}); try again once that process has finished"
        )
    if name in {"OperationalError", "InsufficientPrivilege"} or "Operational" in name:
        return StoreUnavailable(f"cannot connect to the database {shown} ({name}: {detail})")
    return StoreUnavailable(
        f"cannot open the database {shown} ({name}: {detail}); "
        "is it damaged or not a Warden database?"
    )


def _locked(detail: BaseException) -> bool:
    """SQLite's "database is locked" (``SQLITE_BUSY`` after ``busy_timeout``)."""
    return str(detail).startswith(("database is locked", "database table is locked"))


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option(
        "script_location", str(resources.files("warden.store").joinpath("migrations"))
    )
    return cfg


def head_revision() -> str:
    """The schema revision this Warden writes (the newest migration; tests hold it to
    Alembic's own head)."""
    return SCHEMA_REVISION


def stored_revision(conn: Connection) -> str | None:
    """The revision in the database's ``alembic_version`` table on ``conn``; None when
    there is no such table or it does not hold exactly one revision. One query, without
    Alembic: a database already at :func:`head_revision` is opened without importing it
    (every CLI command and server start saves its import)."""
    if not conn.dialect.has_table(conn, "alembic_version"):
        return None
    rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
    return str(rows[0][0]) if len(rows) == 1 else None


#: The first half of the PostgreSQL advisory lock that serialises migrations ("ward" in
#: ASCII); the second half is the schema's name hashed, so that Wardens in other schemas
#: of one database do not wait for each other.
_MIGRATION_LOCK = 0x77617264
#: How long a replica waits for another replica's migration (``lock_timeout`` inside the
#: migration's transaction): a migration can take far longer than a row lock should.
MIGRATION_LOCK_TIMEOUT_MS = 300_000
#: Taken at the start of a migration's transaction, on the schema being migrated.
MIGRATION_LOCK_SQL = f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK}, hashtext(current_schema()))"


def upgrade(engine: Engine) -> None:
    """Run the Alembic migrations to ``head`` on ``engine`` (nothing when the database is
    at head already). Raises ConfigError for a revision this Warden does not know or a
    migration Alembic refuses."""
    with engine.connect() as conn:
        if stored_revision(conn) == SCHEMA_REVISION:
            # Migrations only move forward: a replica migrating now has not committed
            # yet (PostgreSQL's DDL is transactional), so this reads its old revision.
            return
    # Alembic logs one "setup plugin" line per plugin at INFO as it is imported, which
    # told an operator nothing; its "Running upgrade A -> B" lines stay.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    from alembic import command
    from alembic.util import CommandError

    cfg = _alembic_config()
    shown = engine.url.render_as_string(hide_password=True)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                # Replicas starting together migrate one at a time; the others wait for it
                # (longer than a row lock: a migration is slow on a loaded server), then
                # find the schema at head and do nothing. Released when this transaction
                # ends.
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{MIGRATION_LOCK_TIMEOUT_MS}ms'")
                conn.exec_driver_sql(MIGRATION_LOCK_SQL)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except CommandError as exc:
        if "Can't locate revision" in str(exc):
            raise ConfigError(
                f"the database {shown} is at a schema revision this Warden does not know "
                f"({exc}): it was written by a newer Warden, or by another application "
                "(give Warden a database of its own)"
            ) from exc
        raise ConfigError(f"cannot migrate the database {shown}: {exc}") from exc


def check_revision(engine: Engine) -> None:
    """Refuse (ConfigError) a database whose schema is not exactly this Warden's."""
    with engine.connect() as conn:
        current = stored_revision(conn)
    head = head_revision()
    if current is None:
        raise ConfigError(
            f"{engine.url.render_as_string()} is not a Warden database (no schema revision)"
        )
    if current != head:
        raise ConfigError(
            f"the database schema is at revision {current}, this Warden reads {head}: "
            "start `warden serve` on it once (it migrates on start), or use the Warden "
            "version that wrote it"
        )


def _integrity(
    reason: IntegrityReason, msg: str, session_id: str, seq: int | None = None
) -> IntegrityError:
    """An IntegrityError worded like warden.ledger.verify's ("session X entry seq N: …")."""
    where = f"session {session_id}" + (f" entry seq {seq}" if seq is not None else "")
    return IntegrityError(f"{where}: {msg}", reason=reason, session_id=session_id, seq=seq)


def _strict_column(value: Any, column: str, session_id: str, seq: int | None = None) -> Any:
    """A stored JSON column parsed strictly (UTF-8 text, no duplicate keys, no NaN),
    else ``IntegrityError(record_hash_mismatch)`` naming the row."""
    if not isinstance(value, str):
        kind = "not UTF-8 text" if isinstance(value, bytes) else f"a {type(value).__name__}"
        raise _integrity(
            IntegrityReason.RECORD_HASH_MISMATCH,
            f"the {column} column is not JSON text ({kind})",
            session_id,
            seq,
        )
    try:
        return parse_strict_json(value)
    except ParseError as exc:
        raise _integrity(
            IntegrityReason.RECORD_HASH_MISMATCH,
            f"the {column} column is not strict JSON ({exc.message})",
            session_id,
            seq,
        ) from exc


def _lenient_text(raw: bytes) -> str | bytes:
    """SQLite text factory for reading rows to verify: undecodable text stays bytes
    (and is then refused by row) instead of failing the whole query."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


#: The condition that keeps a head from moving for a revoked agent key or agent.
_KEY_LIVE = (
    " AND EXISTS (SELECT 1 FROM agent_keys k JOIN agents a ON a.agent_id = k.agent_id "
    "WHERE k.key_id = ? AND k.revoked_at IS NULL AND a.revoked_at IS NULL)"
)

#: A request id recorded by a refused step (``record_replay``: no entry was written).
_REFUSED = "SELECT 1 FROM replay_keys WHERE session_id = ? AND kind = 'request_id' AND value = ?"
#: The head-move condition that an appended request id was not refused before.
_NOT_REFUSED = " AND NOT EXISTS (" + _REFUSED + ")"


def chained_request_id(item: PendingAppend) -> str | None:
    """The request id of ``item`` when its entry's step id is that id: the entries'
    unique ``(session_id, step_id)`` index then refuses its replay, and no replay_keys
    row is written for it (issue 16: no separate replay-key insert where a unique index
    already refuses the replay; decision 273). None otherwise."""
    if item.replay is None or item.entry.get("step_id") != item.replay.request_id:
        return None
    return item.replay.request_id


#: One ACS append on PostgreSQL as one statement (its own transaction in autocommit, so
#: one round trip): move the head if it is where the entry was chained and the agent key
#: is live, record the replay keys, insert the entry as the next transparency-log leaf.
#: No row back means the head did not move (classified after); a unique violation names
#: its constraint. The log counter is locked first (``lk``, evaluated before the session
#: row is locked, the order a group-commit batch takes them in) and bumped only when the
#: head moved (``leaf``), so the index is gapless and costs no round trip.
_PG_APPEND = (
    """
WITH lk AS (
  SELECT next_index FROM log_state WHERE id = 1 FOR UPDATE
), head AS (
  UPDATE sessions SET head_seq = %(seq)s, head_hash = %(hash)s, head_signature = %(sig)s,
         closed = (closed OR %(close)s)
  WHERE session_id = %(sid)s AND head_seq = %(expected)s AND EXISTS (SELECT 1 FROM lk)
    AND (%(key)s::text IS NULL OR EXISTS (
      SELECT 1 FROM agent_keys k JOIN agents a ON a.agent_id = k.agent_id
      WHERE k.key_id = %(key)s::text AND k.revoked_at IS NULL AND a.revoked_at IS NULL))
    AND (%(chained)s::text IS NULL OR NOT EXISTS (
      SELECT 1 FROM replay_keys WHERE session_id = %(sid)s AND kind = 'request_id'
        AND value = %(chained)s::text))
  RETURNING session_id
), replay AS (
  INSERT INTO replay_keys (session_id, kind, value, seen_at)
  SELECT head.session_id, v.kind, v.value, %(now)s
  FROM head, (VALUES ('request_id', %(rid)s::text), ('nonce', %(nonce)s::text)) AS v(kind, value)
  WHERE v.value IS NOT NULL
  RETURNING 1
)
"""
    + LEAF_AND_ENTRY
    + "RETURNING seq\n"
)


class _LazyBegin:
    """PostgreSQL: a transaction's cursor whose ``BEGIN`` goes with its first statement,
    whose reads known in advance go with that ``BEGIN``, and whose writes nobody reads
    back go with the statement after them.

    The first ``execute`` sends ``BEGIN; <prefetched reads>; <statement bound
    client-side>`` in one string (one round trip, decision 683); each prefetched read's
    row is handed to the callback that asked for it (:meth:`prefetch`, decision 700), the
    statement's results are read from that client-side cursor. A deferred write
    (:meth:`defer`: a Warden-chain append whose head this transaction holds locked,
    decision 701) is
    sent in one string with the next statement, or with ``COMMIT``, in the order it was
    made, so every later statement sees it; ``COMMIT`` is refused unless every deferred
    head move landed (:meth:`_moved_check`). Every other statement runs on the store's
    cursor as before. A transaction that sent nothing commits nothing (``commit`` sends
    no ``COMMIT`` without a ``BEGIN``, but a deferred write gets its ``BEGIN`` then)."""

    def __init__(self, store: SqlStore, cur: Any) -> None:
        self._store = store
        self._cur = cur
        self._client = store._client_cursor()  # noqa: SLF001 - the store's own helper
        self._active = cur
        self.begun = False
        self._prefetch: list[tuple[str, Callable[[Any], object]]] = []
        self._pending: list[str] = []
        #: chain session id → the entry hash its head holds once the deferred writes ran.
        self._moved: dict[str, str] = {}
        #: A deferred head move chains on a head read without a lock (decision 800): a
        #: failed check at ``COMMIT`` is then :class:`UnlockedHeadMoved`, not a fault.
        self.unlocked = False

    def prefetch(self, sql: str, params: Any, receive: Callable[[Any], object]) -> bool:
        """Send the read ``sql`` with ``BEGIN`` and hand its first row (or None) to
        ``receive`` then; False (nothing sent) once the transaction has begun."""
        if self.begun:
            return False
        self._prefetch.append((self._client.mogrify(sql, params), receive))
        return True

    def defer(
        self,
        sql: str,
        params: Any,
        session_id: str | None = None,
        entry_hash: str | None = None,
    ) -> None:
        """Send the write ``sql`` with the next statement (its results are never read;
        a failure fails that statement, or ``COMMIT``, and the transaction rolls back).
        ``session_id``: it moves that chain's head, locked by this transaction, to
        ``entry_hash``, which ``COMMIT`` checks."""
        if not self.begun:  # nothing to send it after: send it now
            self.execute(sql, params)
            return
        self._pending.append(self._client.mogrify(sql, params))
        if session_id is not None and entry_hash is not None:
            self._moved[session_id] = entry_hash

    def execute(self, sql: str, params: Any = None) -> Any:
        if sql == "ROLLBACK":
            self._pending.clear()
            self._moved.clear()
            if not self.begun:
                return None  # nothing was begun
            self._active = self._cur
            return self._cur.execute(sql)
        if self.begun and not self._pending:
            self._active = self._cur
            return self._cur.execute(sql, params)
        self._send(self._client.mogrify(sql, params) if params else sql)
        return self._client

    def _send(self, last: str) -> None:
        """``last`` in one string after ``BEGIN`` and the prefetched reads (the first
        statement) and the deferred writes; the client cursor left on ``last``'s result."""
        first = not self.begun
        lead = ["BEGIN", *(sql for sql, _ in self._prefetch)] if first else []
        pending, self._pending = self._pending, []
        text = "; ".join([*lead, *pending, last])
        self.begun = True  # from here a failure rolls back whatever the server began
        try:
            self._client.execute(text)
        except Exception:
            store = self._store
            if not first or not store._broken():  # noqa: SLF001
                raise
            # The server dropped the connection before this transaction's first
            # statement (restart, failover): nothing was done, so reconnect and send it
            # again, as an eager BEGIN would have.
            self._cur.close()
            self._cur = store._cursor()  # noqa: SLF001
            self._client = store._client_cursor()  # noqa: SLF001
            self._client.execute(text)
        if first:
            self._client.nextset()  # past BEGIN's result
            prefetched, self._prefetch = self._prefetch, []
            for _, receive in prefetched:
                receive(self._client.fetchone())
                self._client.nextset()
        for _ in pending:
            self._client.nextset()
        self._active = self._client

    def executemany(self, sql: str, rows: Any) -> Any:
        if not self.begun or self._pending:
            self._send("SELECT 1")
        self._active = self._cur
        return self._cur.executemany(sql, rows)

    def _moved_check(self) -> str:
        """A statement that writes NULL into the NOT NULL log counter (refusing the
        commit) unless every deferred head move landed; "" if nothing was deferred."""
        if not self._moved:
            return ""
        moved = " AND ".join(
            self._client.mogrify(
                "EXISTS (SELECT 1 FROM sessions WHERE session_id = %s AND head_hash = %s)",
                (sid, digest),
            )
            for sid, digest in self._moved.items()
        )
        return (
            f"UPDATE log_state SET next_index = CASE WHEN {moved} THEN next_index "
            "ELSE NULL END WHERE id = 1; "
        )

    def commit(self, end: str) -> None:
        """Send ``end`` (``… COMMIT``) after the deferred writes and their check, with
        ``BEGIN`` first if nothing was sent yet."""
        pending = "".join(sql + "; " for sql in self._pending) + self._moved_check()
        self._pending = []
        if self.begun:
            try:
                self._cur.execute(pending + end)
            except Exception as exc:
                # The check's NULL in the counter: a head read without a lock moved
                # before this transaction's append locked it (every other head move
                # deferred here was on a head this transaction held locked).
                if self.unlocked and _counter_refused(exc):
                    raise UnlockedHeadMoved(
                        "a chain head read without a lock moved before the append: "
                        + ", ".join(sorted(self._moved))
                    ) from exc
                raise
        elif end != "COMMIT":
            self._cur.execute("BEGIN; " + end)

    def __getattr__(self, name: str) -> Any:
        # fetchone, fetchall, nextset, rowcount, description: the last statement's cursor.
        return getattr(self._active, name)

    def close(self) -> None:
        self._client.close()
        self._cur.close()


def _counter_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is :meth:`_LazyBegin._moved_check` refusing a commit: a NOT NULL
    violation on ``log_state`` (no other statement writes NULL there)."""
    diag = getattr(exc, "diag", None)
    return getattr(exc, "sqlstate", None) == "23502" and (
        getattr(diag, "table_name", None) == "log_state"
    )


def pg_append_params(item: PendingAppend, response: Any, now: str) -> dict[str, Any]:
    """:data:`_PG_APPEND`'s parameters for ``item`` with ``response`` (or None)."""
    chained = chained_request_id(item)
    return {
        "key": item.agent_key,
        "sid": item.session_id,
        "expected": item.expected_seq,
        "seq": item.expected_seq + 1,
        "hash": item.entry["entry_hash"],
        "sig": _dumps(item.head_signature),
        "close": bool(item.close),
        # A chained request id is recorded by the entry's step id (decision 273).
        "rid": item.replay.request_id if item.replay is not None and chained is None else None,
        "chained": chained,
        "nonce": item.replay.nonce if item.replay is not None else None,
        "now": now,
        "step_id": str(item.entry.get("step_id", "")),
        "step_type": str(item.entry.get("step_type", "")),
        "entry": _dumps(item.entry),
        "response": _dumps(response) if response is not None else None,
        "request": item.request,
    }


#: One ACS entry row (qmark style; :meth:`SqlStore._q` or ``%s`` for PostgreSQL).
INSERT_ENTRY = (
    "INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, "
    "entry, response, created_at, request, log_index) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


#: A chain's head moved to an item's entry, only from the head it was chained on (qmark
#: style, like :data:`INSERT_ENTRY`).
HEAD_MOVE = (
    "UPDATE sessions SET head_seq = ?, head_hash = ?, head_signature = ?, "
    "closed = (closed OR ?) WHERE session_id = ? AND head_seq = ?"
)


def head_move_row(item: PendingAppend, *, sqlite: bool = False) -> tuple[str, tuple[Any, ...]]:
    """The head move of ``item`` (its entry at ``expected_seq + 1``): :data:`HEAD_MOVE`,
    with the clause that moves it only while the signing agent key is live when the item
    carries one (issue 15), and only while a chained request id was not refused before
    (:func:`chained_request_id`, decision 273), and its values. ``sqlite``: the close
    flag as the integer SQLite stores for a boolean (the ``sqlite3`` module binds a
    ``bool`` only after failing to adapt it, ~4,500 instructions; decision 872)."""
    sql = HEAD_MOVE
    # Not ``int(...) if sqlite else bool(...)``: mypy types that expression ``int`` (the
    # join of the two), and compiled by mypyc a ``bool`` typed ``int`` becomes 0 or 1,
    # which PostgreSQL refuses in ``closed OR ?`` (decision 1163).
    close: object = bool(item.close)
    if sqlite:
        close = int(item.close)
    values: tuple[Any, ...] = (
        item.expected_seq + 1,
        item.entry["entry_hash"],
        _dumps(item.head_signature),
        close,
        item.session_id,
        item.expected_seq,
    )
    if item.agent_key is not None:
        sql += _KEY_LIVE
        values = (*values, item.agent_key)
    chained = chained_request_id(item)
    if chained is not None:
        sql += _NOT_REFUSED
        values = (*values, item.session_id, chained)
    return sql, values


def entry_row(item: PendingAppend, response: Any, log_index: int) -> tuple[Any, ...]:
    """:data:`INSERT_ENTRY`'s values for ``item`` (its entry at ``expected_seq + 1``),
    with ``response`` (the signed answer, or None) and its transparency-log index."""
    return (
        item.session_id,
        item.expected_seq + 1,
        item.entry["entry_hash"],
        str(item.entry.get("step_id", "")),
        str(item.entry.get("step_type", "")),
        _dumps(item.entry),
        _dumps(response) if response is not None else None,
        _now(),
        item.request,
        log_index,
    )


#: False were :mod:`warden.store.base` compiled by mypyc (it is not: decision 1161).
_SESSION_STATE_HAS_DICT = SessionState.__dictoffset__ != 0


def _moved_state(state: SessionState, seq: int, entry_hash: str, close: bool) -> SessionState:
    """``replace(state, head_seq=seq, head_hash=entry_hash, closed=state.closed or close)``
    without ``dataclasses.replace``'s field walk and frozen ``__init__`` (3.8 µs → 0.5 µs
    on every append, decision 871): the same fields copied, three of them changed.
    :class:`SessionState` has no ``__post_init__`` to skip. ``replace`` itself when
    :class:`SessionState` is a mypyc native class, which has no ``__dict__`` (decision 1161)."""
    if not _SESSION_STATE_HAS_DICT:
        return replace(state, head_seq=seq, head_hash=entry_hash, closed=state.closed or close)
    moved = object.__new__(SessionState)
    fields = moved.__dict__
    fields.update(state.__dict__)
    fields["head_seq"] = seq
    fields["head_hash"] = entry_hash
    fields["closed"] = state.closed or close
    return moved


class _EntryConflict(Exception):
    """The entry insert hit a uniqueness constraint (seq or step id); classified after
    rolling back to the item's savepoint."""


class SqlStore:
    """Sessions, replay keys and chained entries in one SQL database.

    The per-step path (load session, record replay keys, append) runs on one
    DB-API connection with prepared SQL, because SQLAlchemy's statement
    overhead is larger than the work itself; export, counts and migrations use
    SQLAlchemy Core. Session states are cached in memory and the cache is only
    a hint: ``append`` commits conditionally on the stored head, so a stale
    cache yields ``HeadMoved`` (and the caller reloads with ``fresh=True``).
    """

    def __init__(self, engine: Engine, *, read_pool_size: int = 4) -> None:
        self._engine = engine
        self._lock = threading.RLock()
        self._qmark = engine.dialect.paramstyle == "qmark"
        #: PostgreSQL: read-modify-write rows are locked (``SELECT … FOR UPDATE``); SQLite
        #: needs no row locks because ``BEGIN IMMEDIATE`` already serialises writers.
        self.row_locks = engine.dialect.name == "postgresql"
        self._closed = False
        self._raw: Any = self._connect()
        #: PostgreSQL: a pool of autocommit connections for reads on the decision path
        #: (``database_pool_size``), so that they do not queue behind a commit in flight
        #: on the writing connection; no pre-ping (a round trip per read): a connection
        #: found dropped is invalidated and the read fails (its caller falls back).
        self._reads: Engine | None = (
            create_engine(
                engine.url,
                pool_size=read_pool_size,
                max_overflow=0,
                pool_timeout=5,
                isolation_level="AUTOCOMMIT",
            )
            if self.row_locks
            else None
        )
        if self._reads is not None:
            with self._reads.connect():  # its dialect set-up now, not on a decision
                pass
        self._cache: dict[str, SessionState] = {}
        self.session_signer: SessionSigner | None = None
        #: The transparency log's counter inside the open write transaction:
        #: ``(next_index read at the first append, next index to assign)``; None until
        #: the transaction appends (see :meth:`_leaf_index`).
        self._log_tx: list[int] | None = None
        #: PostgreSQL: writes sent with the open write transaction's COMMIT (:meth:`_defer`).
        self._deferred: list[str] = []
        #: PostgreSQL: a transaction a failed read guard left open holding no row lock
        #: (:meth:`_pg_begin_guarded`); its end goes with the next ``BEGIN`` on
        #: the connection (:meth:`_begin`), or is sent before any other use of it
        #: (:meth:`_cursor`; decision 821).
        self._dangling = False
        self._checkpointer: _Checkpointer | None = None
        #: When the last write transaction of this store committed (``time.monotonic()``).
        self._last_write = 0.0
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            # Checkpoint the WAL off the request path: an automatic checkpoint runs
            # inside the committing request and is the largest latency tail.
            cur = self._raw.cursor()
            cur.execute("PRAGMA wal_autocheckpoint=0")
            cur.close()
            self._checkpointer = _Checkpointer(
                engine, self._lock, last_write=lambda: self._last_write
            )

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def last_write_at(self) -> float:
        """When this store's last write transaction committed (``time.monotonic()``
        seconds; 0.0 before the first)."""
        return self._last_write

    def _connect(self) -> Any:
        raw = self._engine.raw_connection()
        if self.row_locks:
            dbapi: Any = raw.dbapi_connection
            dbapi.autocommit = True
        return raw

    def _broken(self) -> bool:
        """The server dropped the connection (restart, failover, a terminated backend):
        psycopg marks it ``closed``/``broken`` once a statement has failed on it."""
        dbapi = self._raw.dbapi_connection
        return dbapi is None or bool(
            getattr(dbapi, "closed", False) or getattr(dbapi, "broken", False)
        )

    def _cursor(self, *, absorb: bool = False) -> Any:
        """A cursor on the store's connection (the caller holds ``_lock``); a connection
        the server dropped is replaced first, and a transaction a failed read guard left
        open is ended (unless ``absorb``: the caller sends its end with its ``BEGIN``,
        :meth:`_begin`). StoreUnavailable if the store is closed or the
        database cannot be reached."""
        if self._closed:
            raise StoreUnavailable("the store is closed")
        if self._broken():
            log.warning("the database connection was lost; reconnecting")
            self._dangling = False  # the server ended it with the connection
            with suppress(Exception):  # it is gone either way
                self._raw.invalidate()
            try:
                self._raw = self._connect()
            except Exception as exc:  # noqa: BLE001 - the server is still down
                raise StoreUnavailable(f"cannot reconnect to the database: {exc}") from exc
        cur = self._raw.cursor()
        if self._dangling and not absorb:
            self._dangling = False
            self._end_dangling(cur)
        return cur

    def _end_dangling(self, cur: Any) -> None:
        """End the read-only transaction a failed read guard left open. ``COMMIT``, not
        ``ROLLBACK``: it wrote and locked nothing, so both end it alike, and psycopg drops
        its prepared statements after any ``ROLLBACK`` (one more round trip, and every
        statement parsed again)."""
        try:
            cur.execute(_END_DANGLING)
        except Exception:  # noqa: BLE001 - the connection's next use reconnects
            log.warning("could not end a transaction left open by a failed read guard")

    def _begin(self) -> tuple[str, int]:
        """PostgreSQL: the string that begins a transaction on a cursor from
        ``_cursor(absorb=True)``, and how many results precede ``BEGIN``'s: the
        end of a transaction a failed read guard left open rides with it
        (decision 821)."""
        if self._dangling:
            self._dangling = False
            return f"{_END_DANGLING}; BEGIN", 1
        return "BEGIN", 0

    def _pg_begin_guarded(self, cur: Any, item: PendingAppend) -> int:
        """PostgreSQL, one round trip: ``BEGIN``, the log counter locked and read, and
        each read guard's task row. Returns the next leaf index; raises
        :class:`StaleRead` when a guarded task changed, with ``found``: the newest task
        bound to the guarded action, read in the same round trip (only when the guard
        fails), so the desk need not read it again (decision 820). The counter is locked
        only while the guards hold: a guard that no longer does leaves the transaction
        open, read-only and holding no row lock (``_dangling``: its end rides with the
        next ``BEGIN``, decision 821); otherwise the caller rolls back."""
        begin, skip = self._begin()
        keyed = [g for g in item.guards if g.scope is not None and g.action_hash is not None]
        args: list[str] = []
        lock = _LOG_LOCK
        if keyed:
            # The counter locked only if every keyed guard holds as this statement reads
            # it; the guards are read again after the lock, as before (a task decided
            # while this waited for the counter is seen there).
            holds = "".join(" AND " + _GUARD_HOLDS for _ in keyed)
            lock = _LOG_LOCK.replace(" FOR UPDATE", holds + " FOR UPDATE")
            for guard in keyed:
                args += [guard.task_id, guard.updated_at]
        sql = f"{begin}; {lock}"
        for guard in item.guards:
            # Not locked: a desk transaction locks its task before the log counter, so
            # locking the task after the counter here could deadlock with it. A change
            # committed after this read is as if it came after the step.
            sql += "; SELECT updated_at FROM tasks WHERE task_id = %s"
            args.append(guard.task_id)
        for guard in keyed:
            # What the desk reads next when the guard fails: no row (and no scan) else.
            sql += "; " + _FOUND
            args += [_APPROVED, str(guard.scope), str(guard.action_hash)]
            args += [guard.task_id, guard.updated_at]
        cur.execute(sql, args)
        for _ in range(skip + 1):
            cur.nextset()  # past BEGIN's result (and the left-open transaction's end)
        counter = cur.fetchone()
        failed: TaskUnchanged | None = None
        for guard in item.guards:
            cur.nextset()
            row = cur.fetchone()
            if failed is None and (row is None or str(row[0]) != guard.updated_at):
                failed = guard
        found: Any = StaleRead.MISSING
        for guard in keyed:
            cur.nextset()
            row = cur.fetchone()
            if guard is failed:
                found = grant_row(row)
        if failed is None:
            return int(self._log_start(counter)[0])
        stale = StaleRead(f"approval task {failed.task_id} changed since it was read")
        stale.found = found
        # Nothing locked (the counter row did not pass its guard): left open, no round
        # trip of its own (decision 821).
        self._dangling = counter is None
        raise stale

    def _client_cursor(self) -> Any:
        """PostgreSQL: a cursor that binds parameters client-side, so one ``execute``
        may carry several statements (an append and its ``COMMIT``) in one round trip.
        The caller holds ``_lock`` and has just used :meth:`_cursor`."""
        import psycopg

        return psycopg.ClientCursor(self._raw.dbapi_connection)

    def _read(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One row (or None) of a read; a dropped connection is replaced and the read
        repeated once (reads have no effects). StoreUnavailable otherwise."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    cur = self._cursor()
                    try:
                        cur.execute(self._q(sql), params)
                        return cur.fetchone()
                    finally:
                        cur.close()
                except StoreUnavailable:
                    raise
                except Exception as exc:
                    if attempt == 1 and self._broken():
                        continue
                    raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _q(self, sql: str) -> str:
        return sql if self._qmark else sql.replace("?", "%s")

    @contextmanager
    def _write(self, *, log: bool = False, lazy: bool = False) -> Iterator[Any]:
        """One write transaction on the raw connection; foreign errors translated.

        ``log``: the transaction will append leaves; on PostgreSQL the log counter is
        read and locked in the same round trip as ``BEGIN`` (see :meth:`_leaf_index`).
        ``lazy`` (PostgreSQL): ``BEGIN`` is sent with the transaction's first statement,
        not in a round trip of its own (:class:`_LazyBegin`, decision 683).
        """
        with self._lock:
            cur = self._cursor()
            begun = committing = False
            begin = "BEGIN IMMEDIATE" if self._qmark else "BEGIN"
            if log and self.row_locks:
                begin += "; " + _LOG_LOCK
            lazy = lazy and self.row_locks and not log
            try:
                try:
                    if lazy:
                        cur = _LazyBegin(self, cur)
                    else:
                        cur.execute(begin)
                except Exception:
                    if not self._broken():
                        raise
                    # The server dropped the connection (restart, failover): nothing has
                    # been done yet, so reconnect and begin again instead of failing.
                    cur = self._cursor()
                    cur.execute(begin)
                begun = True
                self._log_tx = None
                self._deferred = []
                if log and self.row_locks:
                    cur.nextset()
                    self._log_tx = self._log_start(cur.fetchone())
                yield cur
                committing = True
                end = self._log_flush() + "".join(self._deferred) + "COMMIT"
                if isinstance(cur, _LazyBegin):
                    cur.commit(end)
                else:
                    cur.execute(end)
                self._last_write = time.monotonic()
            except BaseException as exc:
                # A BEGIN that failed (SQLite's "database is locked" while another
                # process holds the write lock) left no transaction to roll back.
                if begun:
                    self._rollback(cur)
                if isinstance(exc, WardenError | _EntryConflict | KeyboardInterrupt | SystemExit):
                    raise
                if is_integrity(exc):
                    raise StoreUnavailable(f"unexpected constraint failure: {exc}") from exc
                if committing and self._broken():
                    # The server may have committed before the connection dropped: say so
                    # rather than claim nothing changed.
                    raise StoreUnavailable(
                        f"the database connection was lost during COMMIT ({exc}); the change "
                        "may or may not have been applied",
                        outcome_unknown=True,
                    ) from exc
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}: {exc}") from exc
            finally:
                self._log_tx = None
                self._deferred = []
                cur.close()

    def _defer(self, sql: str, params: tuple[Any, ...]) -> None:
        """PostgreSQL: send ``sql`` with this transaction's ``COMMIT`` (bound client-side,
        in the same string, before it) instead of now: a write whose result nobody reads
        costs no round trip of its own (decision 682). If it fails, PostgreSQL skips the
        ``COMMIT`` after it and the transaction rolls back. The caller holds ``_lock``
        inside :meth:`_write`."""
        bound = self._client_cursor()
        try:
            self._deferred.append(bound.mogrify(sql, params) + "; ")
        finally:
            bound.close()

    def _leaf_index(self, cur: Any) -> int:
        """The transparency-log index of the next entry this transaction appends.

        The first call in a transaction reads the next index (PostgreSQL: the
        ``log_state`` row, locked, so replicas number leaves one transaction at a time;
        SQLite: one past the largest stored index, its ``BEGIN IMMEDIATE`` already making
        this the only writer); later ones count in memory, and on PostgreSQL
        :meth:`_log_flush` writes the counter back once, with COMMIT. An index is used
        only by an entry that was inserted (a failed item's savepoint rollback takes
        nothing): no gaps. On PostgreSQL a group commit reads the counter in BEGIN's
        round trip and writes it in COMMIT's: no extra round trip per batch.
        """
        if self._log_tx is None:
            cur.execute(_LOG_LOCK if self.row_locks else _LOG_MAX)
            self._log_tx = self._log_start(cur.fetchone())
        return self._log_tx[1]

    @staticmethod
    def _log_start(row: Any) -> list[int]:
        if row is None:
            raise StoreUnavailable("the transparency log's counter row (log_state) is missing")
        return [int(row[0]), int(row[0])]

    def _log_flush(self) -> str:
        """PostgreSQL: the statement that writes the log counter back, sent in one string with
        ``COMMIT`` (no round trip of its own), or "" if no leaf was appended. It writes
        NULL (refused: the column is NOT NULL) unless the counter still holds what this
        transaction read, so a counter that moved (it cannot, under the write lock) aborts
        the commit instead of numbering two leaves alike; on PostgreSQL the failed
        statement keeps the COMMIT sent with it from running. The numbers are integers
        this process formatted."""
        if not self.row_locks or self._log_tx is None or self._log_tx[1] == self._log_tx[0]:
            return ""
        start, end = int(self._log_tx[0]), int(self._log_tx[1])
        return (
            f"UPDATE log_state SET next_index = CASE WHEN next_index = {start} "
            f"THEN {end} ELSE NULL END WHERE id = 1; "
        )

    def append_log_event(self, cur: Any, kind: str, detail: dict[str, Any]) -> int:
        """Append an event that belongs to no chain (a server start, a bundle load, an API
        key change) as a leaf, inside the caller's write transaction; return its index.
        The leaf bytes are the stored JSON text ``{"kind", "at", **detail}``."""
        index = self._leaf_index(cur)
        at = _now()
        cur.execute(
            self._q(
                "INSERT INTO log_events (log_index, kind, event, created_at) VALUES (?, ?, ?, ?)"
            ),
            (index, kind, _dumps({"kind": kind, "at": at, **detail}), at),
        )
        assert self._log_tx is not None
        self._log_tx[1] = index + 1
        return index

    def _rollback(self, cur: Any) -> None:
        """Roll back the transaction :meth:`_write` began; a failure is logged, never
        raised (the error that caused the rollback is the one the caller needs)."""
        try:
            cur.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the original error matters more
            if self._broken():  # the connection is gone, and the transaction with it
                log.warning("rollback impossible: the database connection was lost")
            else:
                log.exception("rollback failed")

    @staticmethod
    def _replay_rows(
        session_id: str, replay: ReplayKeys, *, chained: bool = False
    ) -> list[tuple[str, str, str, str]]:
        if chained and replay.nonce is None:
            return []  # the common ACS step: no clock read either
        now = _now()
        rows = [] if chained else [(session_id, "request_id", replay.request_id, now)]
        if replay.nonce is not None:
            rows.append((session_id, "nonce", replay.nonce, now))
        return rows

    def _insert_replay(
        self, cur: Any, session_id: str, replay: ReplayKeys, *, chained: bool = False
    ) -> None:
        """Record ``replay``'s keys; ReplayDetected if one is already there. ``chained``:
        the request id is the step id of the entry this transaction inserts, so the
        entries' unique ``(session_id, step_id)`` index records it and no row is written
        for it (issue 16, decision 273)."""
        self._insert_replay_rows(cur, self._replay_rows(session_id, replay, chained=chained))

    def _insert_replay_rows(self, cur: Any, rows: list[tuple[str, str, str, str]]) -> None:
        """Insert replay-key ``rows``; ReplayDetected if one is already there."""
        if not rows:
            return
        try:
            cur.executemany(
                self._q(
                    "INSERT INTO replay_keys (session_id, kind, value, seen_at) VALUES (?, ?, ?, ?)"
                ),
                rows,
            )
        except Exception as exc:
            if is_integrity(exc):
                raise ReplayDetected("duplicate request_id or nonce") from exc
            raise

    def create_session(
        self, state: SessionState, replay: ReplayKeys, *, agent_key: str | None = None
    ) -> None:
        if state.signature is None and self.session_signer is not None:
            state = replace(state, signature=self.session_signer(state))
        with self._write() as cur:
            self._check_agent_key(cur, agent_key)
            self._insert_replay(cur, state.session_id, replay)
            try:
                self._insert_session(cur, state)
            except Exception as exc:
                if is_integrity(exc):
                    raise SessionRefused(
                        "session already negotiated", reason="renegotiation_not_supported"
                    ) from exc
                raise
        self._cache[state.session_id] = replace(state, closed=False, head_seq=-1, head_hash=None)

    def _insert_session(self, cur: Any, state: SessionState, *, if_absent: bool = False) -> bool:
        """Insert a session row (head -1, open) inside the caller's transaction.

        ``if_absent``: an existing row is left alone and False returned (no constraint
        error, which would abort a PostgreSQL transaction); otherwise a duplicate raises.
        """
        cur.execute(*self._insert_session_sql(state, if_absent=if_absent))
        return bool(cur.rowcount == 1)

    def _insert_session_sql(
        self, state: SessionState, *, if_absent: bool
    ) -> tuple[str, tuple[Any, ...]]:
        """:meth:`_insert_session`'s statement (this store's paramstyle) and values."""
        return (
            self._q(
                "INSERT INTO sessions (session_id, agent_id, key_id, created_at, "
                "negotiated, closed, head_seq, session_signature) "
                "VALUES (?, ?, ?, ?, ?, ?, -1, ?)"
                + (" ON CONFLICT (session_id) DO NOTHING" if if_absent else "")
            ),
            (
                state.session_id,
                state.agent_id,
                state.key_id,
                state.created_at,
                _dumps(state.negotiated),
                False,
                _dumps(state.signature) if state.signature is not None else None,
            ),
        )

    def load_session(self, session_id: str, *, fresh: bool = False) -> SessionState | None:
        if not fresh:
            hit = self._cache.get(session_id)
            if hit is not None:
                return hit
        row = self._read(
            "SELECT session_id, agent_id, key_id, created_at, negotiated, closed, "
            "head_seq, head_hash, session_signature FROM sessions WHERE session_id = ?",
            (session_id,),
        )
        if row is None:
            self._cache.pop(session_id, None)
            return None
        try:
            state = SessionState(
                session_id=row[0],
                agent_id=row[1],
                key_id=row[2],
                created_at=row[3],
                negotiated=_strict_column(row[4], "negotiated", session_id),
                closed=bool(row[5]),
                head_seq=int(row[6]),
                head_hash=row[7],
                signature=(
                    _strict_column(row[8], "session_signature", session_id)
                    if row[8] is not None
                    else None
                ),
            )
        except (IntegrityError, ValueError, TypeError) as exc:
            raise StoreUnavailable(f"session {session_id} has a damaged row: {exc}") from exc
        self._cache[session_id] = state
        if len(self._cache) > _CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))
        return state

    def seen(self, session_id: str, replay: ReplayKeys) -> bool:
        # A chained request id is recorded by its entry's step id alone (decision 273).
        values = [replay.request_id]
        sql = (
            "SELECT 1 FROM replay_keys WHERE session_id = ? "
            "AND ((kind = 'request_id' AND value = ?)"
        )
        if replay.nonce is not None:
            sql += " OR (kind = 'nonce' AND value = ?)"
            values.append(replay.nonce)
        sql += ") UNION ALL SELECT 1 FROM entries WHERE session_id = ? AND step_id = ?"
        return self._read(sql, (session_id, *values, session_id, replay.request_id)) is not None

    def step_entry(self, session_id: str, step_id: str) -> dict[str, Any] | None:
        """The committed entry of request ``step_id`` in the session, or None.

        Raises :class:`StoreUnavailable` if it cannot be read or is not strict JSON.
        """
        row = self._read(
            "SELECT entry FROM entries WHERE session_id = ? AND step_id = ?", (session_id, step_id)
        )
        if row is None:
            return None
        try:
            entry = parse_strict_json(row[0])
        except WardenError as exc:
            raise StoreUnavailable(
                f"entry {step_id} of session {session_id} is damaged: {exc.message}"
            ) from exc
        return entry if isinstance(entry, dict) else None

    def record_replay(self, session_id: str, replay: ReplayKeys) -> None:
        with self._write() as cur:
            # A chained request id has no replay_keys row, only its entry (decision 273).
            cur.execute(
                self._q("SELECT 1 FROM entries WHERE session_id = ? AND step_id = ?"),
                (session_id, replay.request_id),
            )
            if cur.fetchone() is not None:
                raise ReplayDetected("duplicate request_id or nonce")
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
        request: str | None = None,
    ) -> None:
        (error,) = self.append_many(
            [
                PendingAppend(
                    session_id,
                    expected_seq,
                    entry,
                    response,
                    head_signature,
                    replay,
                    close,
                    request,
                )
            ]
        )
        if error is not None:
            raise error

    def append_many(self, items: list[PendingAppend]) -> list[Exception | None]:
        if len(items) == 1:
            # One append needs no savepoint: the transaction is the item (issue 16).
            outcomes: list[Exception | None] = [self._append_single(items[0])]
        elif any(item.folded is not None for item in items):
            # An append carrying a gate's writes commits alone: on PostgreSQL it locks
            # the desk chain before the log counter, which a batch has locked first.
            outcomes = self._append_apart(items)
        else:
            outcomes = self._append_batch(items)
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is None:
                self._advance_cache(item)
            elif isinstance(outcome, HeadMoved) and not isinstance(outcome, StaleRead):
                # (A failed read guard moved no head: the cached session stays, decision
                # 703; the next append checks its head anyway.)
                self._cache.pop(item.session_id, None)
        return outcomes

    def _append_batch(self, items: list[PendingAppend]) -> list[Exception | None]:
        outcomes: list[Exception | None] = []
        # The log counter is read (and on PostgreSQL locked, with BEGIN) before the items'
        # savepoints: a row lock taken inside one would be released by its rollback, and
        # taking it first orders it before every session row lock (no deadlock on it).
        with self._write(log=True) as cur:
            self._leaf_index(cur)
            for i, item in enumerate(items):
                # A savepoint per item: one replay or lost race fails alone.
                savepoint = f"item{i}"
                cur.execute(f"SAVEPOINT {savepoint}")
                try:
                    self._append_one(cur, item)
                except (HeadMoved, ReplayDetected, KeyRevoked, _EntryConflict) as exc:
                    cur.execute(f"ROLLBACK TO {savepoint}")
                    cur.execute(f"RELEASE {savepoint}")
                    outcomes.append(
                        self._classify_conflict(cur, item, exc)
                        if isinstance(exc, _EntryConflict)
                        else exc
                    )
                    continue
                cur.execute(f"RELEASE {savepoint}")
                outcomes.append(None)
        return outcomes

    def _append_apart(self, items: list[PendingAppend]) -> list[Exception | None]:
        """The items without folded writes as one batch, each other item alone."""
        plain = [item for item in items if item.folded is None]
        done = iter(
            self._append_batch(plain)
            if len(plain) > 1
            else [self._append_single(item) for item in plain]
        )
        return [
            self._append_single(item) if item.folded is not None else next(done) for item in items
        ]

    def _append_single(self, item: PendingAppend) -> Exception | None:
        """Commit one append in a transaction of its own: on PostgreSQL one statement in
        autocommit (one round trip, :data:`_PG_APPEND`); on SQLite ``BEGIN IMMEDIATE``,
        the replay keys, the conditional head move (which also checks the agent key)
        and the entry. The error it returns has written nothing."""
        try:
            if self.row_locks:
                return self._append_pg(item)
            with self._write() as cur:
                if item.folded is not None:
                    from warden.store.folded_sql import write_in

                    write_in(self, cur, item)
                self._append_one(cur, item)
            if item.folded is not None:
                item.folded.committed()
            return None
        except (HeadMoved, ReplayDetected, KeyRevoked) as exc:
            return exc
        except _EntryConflict as exc:
            with self._write() as cur:
                return self._classify_conflict(cur, item, exc)

    def _append_pg(self, item: PendingAppend) -> Exception | None:
        if item.folded is not None:
            from warden.store.folded_sql import append_folded

            return append_folded(self, item)
        index: int | None = None
        params = pg_append_params(item, item.response, _now())
        with self._lock:
            cur = self._cursor(absorb=bool(item.indexed is not None or item.guards))
            try:
                if item.indexed is None and not item.guards:
                    cur.execute(_PG_APPEND, params)
                    row = cur.fetchone()
                else:
                    # The response names its leaf index, so the index is read (and the
                    # counter locked) first, with the read guards: BEGIN, the lock and the
                    # guards in one round trip, then the same one-statement append and
                    # COMMIT in a second (both strings bound client-side).
                    both = self._client_cursor()
                    try:
                        index = self._pg_begin_guarded(both, item)
                        if item.indexed is not None:
                            params["response"] = _dumps(item.indexed(index))
                        both.execute(_PG_APPEND + "; COMMIT", params)
                        row = both.fetchone()
                    finally:
                        both.close()
            except StaleRead as exc:
                if not self._dangling:
                    self._rollback(cur)
                return exc
            except Exception as exc:
                self._dangling = False  # sent with this BEGIN, if it was
                if item.indexed is not None or item.guards:
                    with suppress(Exception):  # a dropped connection has nothing to undo
                        self._rollback(cur)
                if is_integrity(exc):
                    constraint = getattr(getattr(exc, "diag", None), "constraint_name", None)
                    if constraint == "pk_replay_keys":
                        return ReplayDetected("duplicate request_id or nonce")
                    raise _EntryConflict(str(exc)) from exc
                if not self._broken():
                    raise StoreUnavailable(f"store error: {exc.__class__.__name__}") from exc
                # The connection dropped: the statement committed or it did not. The
                # entry row (its hash is unique to this append) says which.
                return self._after_lost_append(item, exc)
            finally:
                cur.close()
        if row is not None:
            return None
        return self._why_not_appended(item)

    def _after_lost_append(self, item: PendingAppend, lost: Exception) -> Exception | None:
        try:
            row = self._read(
                "SELECT entry_hash FROM entries WHERE session_id = ? AND seq = ?",
                (item.session_id, item.expected_seq + 1),
            )
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"the database connection was lost during an append ({lost}); the change "
                "may or may not have been applied",
                outcome_unknown=True,
            ) from exc
        if row is not None and row[0] == item.entry["entry_hash"]:
            return None
        return StoreUnavailable(f"the database connection was lost: {lost}")

    def _why_not_appended(self, item: PendingAppend) -> Exception:
        """No row moved: the request id was refused before, the agent key was revoked,
        or the head is no longer expected."""
        chained = chained_request_id(item)
        if item.agent_key is not None or chained is not None:
            with self._write() as cur:
                if chained is not None:
                    try:
                        self._check_not_refused(cur, item.session_id, chained)
                    except ReplayDetected as exc:
                        return exc
                if item.agent_key is not None and not SqlAgents(cur, self._q).key_active(
                    item.agent_key
                ):
                    return KeyRevoked("the agent key that signed this request is revoked")
        return HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")

    @staticmethod
    def _step_id(item: PendingAppend) -> str:
        return str(item.entry.get("step_id", ""))

    def _check_not_refused(self, cur: Any, session_id: str, request_id: str) -> None:
        """Raise ReplayDetected if ``request_id`` was recorded by a refused step."""
        cur.execute(self._q(_REFUSED), (session_id, request_id))
        if cur.fetchone() is not None:
            raise ReplayDetected("duplicate request_id or nonce")

    def _check_agent_key(self, cur: Any, agent_key: str | None) -> None:
        """Raise KeyRevoked unless ``agent_key`` (if any) and its agent are unrevoked: a
        revocation made on any replica stops the next write here (issue 15)."""
        if agent_key is not None and not SqlAgents(cur, self._q).key_active(agent_key):
            raise KeyRevoked("the agent key that signed this request is revoked")

    def _check_guards(self, cur: Any, item: PendingAppend) -> None:
        """Raise StaleRead if a read guard's task changed since it was read."""
        for guard in item.guards:
            cur.execute(
                self._q("SELECT updated_at FROM tasks WHERE task_id = ?"),
                (guard.task_id,),
            )
            row = cur.fetchone()
            if row is None or str(row[0]) != guard.updated_at:
                raise StaleRead(f"approval task {guard.task_id} changed since it was read")

    def _append_one(self, cur: Any, item: PendingAppend) -> None:
        chained = chained_request_id(item)
        replay_rows = (
            self._replay_rows(item.session_id, item.replay, chained=chained is not None)
            if item.replay is not None
            else []
        )
        # SQLite (issue 16, decision 870): when nothing is written before the head move
        # (the common ACS step: its request id is its entry's step id), the read guards
        # ride in the head move itself — its WHERE holds only while every guarded task
        # is as read — instead of a SELECT each. A head that did not move is then
        # classified as before, guards first, so the same error comes in the same order.
        fold = self._qmark and not self.row_locks and not replay_rows
        if not fold:
            self._check_guards(cur, item)
            if replay_rows:
                self._insert_replay_rows(cur, replay_rows)
        # The head moves only while the signing agent key is live and the request id was
        # not refused before: one statement checks all three (a revocation on any replica
        # stops the next write here, issue 15; decision 273).
        move, values = head_move_row(item, sqlite=self._qmark)
        if fold:
            for guard in item.guards:
                move += _GUARD_HOLDS_SQLITE
                values = (*values, guard.task_id, guard.updated_at)
        cur.execute(self._q(move), values)
        if cur.rowcount != 1:
            if fold:
                self._check_guards(cur, item)
            if chained is not None:
                self._check_not_refused(cur, item.session_id, chained)
            self._check_agent_key(cur, item.agent_key)
            raise HeadMoved(f"session {item.session_id} head is no longer seq {item.expected_seq}")
        log_index = self._leaf_index(cur)
        response = item.indexed(log_index) if item.indexed is not None else item.response
        try:
            cur.execute(self._q(INSERT_ENTRY), entry_row(item, response, log_index))
        except Exception as exc:
            if is_integrity(exc):
                raise _EntryConflict(str(exc)) from exc
            raise
        assert self._log_tx is not None
        self._log_tx[1] = log_index + 1

    def _classify_conflict(
        self, cur: Any, item: PendingAppend, conflict: _EntryConflict
    ) -> HeadMoved | ReplayDetected:
        """After the item's rollback: a second entry for a request id is a replay (even
        with its replay keys gone); otherwise the seq was taken (a lost race)."""
        step_id = self._step_id(item)
        if step_id:
            cur.execute(
                self._q("SELECT 1 FROM entries WHERE session_id = ? AND step_id = ? LIMIT 1"),
                (item.session_id, step_id),
            )
            if cur.fetchone() is not None:
                error: HeadMoved | ReplayDetected = ReplayDetected(
                    "this request_id already has an audit entry in the session"
                )
                error.__cause__ = conflict
                return error
        moved = HeadMoved(f"entry seq {item.expected_seq + 1} of {item.session_id} already exists")
        moved.__cause__ = conflict
        return moved

    def _advance_cache(self, item: PendingAppend) -> None:
        with self._lock:
            cached = self._cache.get(item.session_id)
            if cached is not None and cached.head_seq == item.expected_seq:
                self._cache[item.session_id] = _moved_state(
                    cached, item.expected_seq + 1, item.entry["entry_hash"], item.close
                )

    def iter_records(self, session_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Yield the export records of every session (or one), checking what only the
        database holds (see the module docstring); one read snapshot throughout, so a
        writer appending meanwhile (a server running beside ``warden verify``) is seen
        entirely or not at all: never a session's new entry beside its old head."""
        try:
            with self._engine.connect().execution_options(**{_READ_ONLY: True}) as conn:
                dbapi: Any = None
                if self._engine.dialect.name == "sqlite":
                    dbapi = conn.connection.dbapi_connection
                    factory = dbapi.text_factory
                    dbapi.text_factory = _lenient_text
                    # (The engine begins SQLite's read transaction: one snapshot.)
                else:
                    # READ COMMITTED would give each statement its own snapshot.
                    conn.exec_driver_sql(
                        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
                    )
                try:
                    yield from self._records(conn, session_id)
                finally:
                    if dbapi is not None:
                        dbapi.text_factory = factory
        except sa_exc.SQLAlchemyError as exc:
            detail = getattr(exc, "orig", None) or exc
            raise StoreUnavailable(
                f"cannot read the database ({type(detail).__name__}: {detail}); "
                "is it damaged or not a Warden database?"
            ) from exc

    def _records(self, conn: Connection, session_id: str | None) -> Iterator[dict[str, Any]]:
        self._check_orphans(conn, session_id)
        q = select(sessions).order_by(sessions.c.created_at, sessions.c.session_id)
        if session_id is not None:
            q = q.where(sessions.c.session_id == session_id)
        for s in conn.execute(q).all():
            sid = s.session_id
            if not isinstance(sid, str):
                raise _integrity(
                    IntegrityReason.RECORD_HASH_MISMATCH,
                    "the session_id column is not UTF-8 text",
                    str(sid),
                )
            yield self._session_record(s)
            # Any: mypy types each Row of a typed select as a tuple, which mypyc would check
            # it is (decision 1162).
            rows: Any = conn.execute(
                select(
                    entries.c.seq,
                    entries.c.entry_hash,
                    entries.c.step_id,
                    entries.c.step_type,
                    entries.c.entry,
                    entries.c.response,
                    entries.c.request,
                )
                .where(entries.c.session_id == sid)
                .order_by(entries.c.seq)
            )
            # Closed even when a row is refused: an open SQLite cursor keeps its read
            # snapshot, and the WAL checkpoint at close would wait out the busy timeout.
            with rows:
                for r in rows:
                    yield self._entry_record(sid, r)
            head = self._head_record(s)
            if head is not None:
                yield head

    def _check_orphans(self, conn: Connection, session_id: str | None) -> None:
        """Entries whose session row is gone would silently drop out of the walk."""
        q = (
            select(entries.c.session_id, func.count())
            .where(entries.c.session_id.not_in(select(sessions.c.session_id)))
            .group_by(entries.c.session_id)
            .order_by(entries.c.session_id)
            .limit(1)
        )
        if session_id is not None:
            q = q.where(entries.c.session_id == session_id)
        # Any: mypy types a Row of a typed select as a tuple, which mypyc would check it is
        # (decision 1162).
        result: Any = conn.execute(q)
        row = result.first()
        if row is not None:
            raise _integrity(
                IntegrityReason.CHAIN_MISMATCH,
                f"{row[1]} audit entries belong to no session record (session row deleted?)",
                str(row[0]),
            )

    @staticmethod
    def _session_record(s: Any) -> dict[str, Any]:
        sid = s.session_id
        for column in ("agent_id", "key_id", "created_at"):
            if not isinstance(getattr(s, column), str):
                raise _integrity(
                    IntegrityReason.RECORD_HASH_MISMATCH, f"the {column} column is not text", sid
                )
        rec: dict[str, Any] = {
            "kind": "session",
            "session_id": sid,
            "agent_id": s.agent_id,
            "key_id": s.key_id,
            "created_at": s.created_at,
            "negotiated": _strict_column(s.negotiated, "negotiated", sid),
        }
        if s.session_signature is not None:
            rec["signature"] = _strict_column(s.session_signature, "session_signature", sid)
        return rec

    @staticmethod
    def _entry_record(sid: str, r: Any) -> dict[str, Any]:
        seq = r.seq
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise _integrity(
                IntegrityReason.RECORD_HASH_MISMATCH,
                f"the seq column of an entry is not an integer ({seq!r})",
                sid,
            )
        entry = _strict_column(r.entry, "entry", sid, seq)
        if not isinstance(entry, dict):
            raise _integrity(
                IntegrityReason.RECORD_HASH_MISMATCH, "the entry column is not an object", sid, seq
            )
        # The denormalized columns (what SQL queries and the step index see) must say
        # exactly what the hashed entry says.
        for column, stored, own in (
            ("entry_hash", r.entry_hash, entry.get("entry_hash")),
            ("step_id", r.step_id, str(entry.get("step_id", ""))),
            ("step_type", r.step_type, str(entry.get("step_type", ""))),
        ):
            if stored != own:
                raise _integrity(
                    IntegrityReason.RECORD_HASH_MISMATCH,
                    f"the {column} column ({stored!r}) differs from the entry's ({own!r})",
                    sid,
                    seq,
                )
        rec: dict[str, Any] = {"kind": "entry", "session_id": sid, "seq": seq, "entry": entry}
        if r.response is not None:
            rec["response"] = _strict_column(r.response, "response", sid, seq)
        if r.request is not None:
            if not isinstance(r.request, str):
                raise _integrity(
                    IntegrityReason.RECORD_HASH_MISMATCH,
                    "the request column is not UTF-8 text",
                    sid,
                    seq,
                )
            rec["request"] = r.request
        return rec

    @staticmethod
    def _head_record(s: Any) -> dict[str, Any] | None:
        sid = s.session_id
        if not isinstance(s.head_seq, int) or isinstance(s.head_seq, bool):
            raise _integrity(
                IntegrityReason.RECORD_HASH_MISMATCH, "the head_seq column is not an integer", sid
            )
        if s.head_seq < 0:
            if s.closed:
                raise _integrity(
                    IntegrityReason.CHAIN_MISMATCH,
                    "the session is marked closed but has no entries",
                    sid,
                )
            return None
        if not isinstance(s.head_hash, str):
            raise _integrity(
                IntegrityReason.RECORD_HASH_MISMATCH, "the head_hash column is not text", sid
            )
        return {
            "kind": "head",
            "session_id": sid,
            "seq": s.head_seq,
            "chain_hash": s.head_hash,
            "closed": bool(s.closed),
            "signature": (
                _strict_column(s.head_signature, "head_signature", sid)
                if s.head_signature is not None
                else None
            ),
        }

    def forget_session(self, session_id: str) -> None:
        """Drop a cached session state (after it changed outside ``append``)."""
        self._cache.pop(session_id, None)

    def spend_transaction(
        self, *, unlocked_heads: bool = False
    ) -> AbstractContextManager[SqlSpendTx]:
        """One write transaction for the spend engine (see :mod:`warden.store.spend_sql`);
        ``unlocked_heads``: it may chain on heads read without a lock (decision 800)."""
        from warden.store.spend_sql import spend_transaction

        return spend_transaction(self, unlocked_heads=unlocked_heads)

    def transaction(self, *, unlocked_heads: bool = False) -> AbstractContextManager[SqlSpendTx]:
        """One write transaction carrying every table behind the wires (budgets, tasks,
        idempotency keys, the outbox, Warden-authored chains)."""
        return self.spend_transaction(unlocked_heads=unlocked_heads)

    @contextmanager
    def reading(self) -> Iterator[SqlReadTx]:
        """A read-only view of the tables behind the wires: no write lock and no
        transaction (each read sees what is committed). For lookups on the decision path
        that usually need no write (a pending approval task), so that they do not take
        a second write transaction (issue 16)."""
        from warden.store.api_keys_sql import read_cursor
        from warden.store.tasks_sql import SqlTasks

        if self._reads is None:
            # SQLite: one connection in this process; a read there takes no write lock.
            with read_cursor(self) as cur:
                yield SqlReadTx(SqlTasks(cur, self._q, row_locks=False))
            return
        try:
            conn = self._reads.connect()
        except Exception as exc:
            raise StoreUnavailable(f"store error: {exc.__class__.__name__}: {exc}") from exc
        with conn:
            cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                yield SqlReadTx(SqlTasks(cur, self._q, row_locks=False))
            except (WardenError, GeneratorExit):
                raise
            except Exception as exc:
                conn.invalidate()  # a dropped connection is not handed out again
                raise StoreUnavailable(f"store error: {exc.__class__.__name__}: {exc}") from exc
            finally:
                cur.close()

    def budgets(self) -> list[Budget]:
        """Every budget, by id."""
        from warden.store.spend_sql import list_budgets

        return list_budgets(self)

    def ping(self) -> None:
        """One round trip to the database (``SELECT 1``); StoreUnavailable if it fails.
        Cheap at any size, unlike :meth:`counts` (readiness probes call it often)."""
        self._read("SELECT 1", ())

    def probe_write(self) -> None:
        """A write transaction that inserts one row and rolls back, bounded by a 1 s lock
        wait (:mod:`warden.store.readiness`); StoreUnavailable (``store_not_writable``)
        if the database refuses it."""
        from warden.store.readiness import probe_write

        probe_write(self)

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
            self._closed = True
            try:
                self._raw.close()
            finally:
                self._engine.dispose()
                if self._reads is not None:
                    self._reads.dispose()


class _Checkpointer:
    """A daemon thread that checkpoints the SQLite WAL (PASSIVE) every ``interval`` s, and
    restarts it once it holds ``restart_frames`` frames or more.

    A PASSIVE checkpoint never waits for a writer, so under back-to-back commits it never
    copies the last frames and SQLite never starts the WAL over: the file grew by ~28 kB an
    ask for as long as the load lasted (80 MB after 3,000 asks). Above the bound a RESTART
    checkpoint makes writers wait while it copies what is left (a few milliseconds, once
    per ``restart_frames`` frames), after which the next commit starts the WAL over
    (decision 311). It takes ``write_lock`` (the store's: every write of this process
    holds it), since between back-to-back commits SQLite's own lock is free for too short
    a time to be won by polling. A RESTART also waits for readers on older snapshots (a
    ``warden verify`` beside the server) while holding writers off, so that wait is bounded
    by ``restart_wait_ms``, not the busy timeout: one that cannot finish in time is tried
    again next tick.
    """

    def __init__(
        self,
        engine: Engine,
        write_lock: AbstractContextManager[Any],
        interval: float = 0.25,
        restart_frames: int = 4096,
        restart_wait_ms: int = 100,
        last_write: Callable[[], float] | None = None,
        quiet: float = 0.02,
    ) -> None:
        self._engine = engine
        self._write_lock = write_lock
        self._interval = interval
        self._restart_frames = restart_frames
        self._restart_wait_ms = restart_wait_ms
        #: A tick that falls less than ``quiet`` s after a commit of this process waits
        #: for a pause in the writes, for at most one more ``interval`` (decision 1123).
        self._pauses = WritePauses(last_write, quiet) if last_write is not None else None
        self._stop = threading.Event()
        # Not ``_thread``: mypyc names the C field after the attribute, and ``__thread``
        # is a gcc keyword (decision 1160).
        self._worker = threading.Thread(target=self._run, name="warden-wal-checkpoint", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        conn: Any = self._engine.raw_connection()
        try:
            # A checkpoint copies pages and syncs the database file on the other core
            # while a request commits: it lengthened the asks it overlapped (5-10 % of
            # them under back-to-back asks, bench/RESULTS.md), so it waits for a pause.
            for _ in paced(self._stop, self._interval, self._pauses):
                try:
                    cur = conn.cursor()
                    # (busy, frames in the WAL, frames copied); -1s when not in WAL mode.
                    _busy, frames, _copied = cur.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchone()
                    if frames >= self._restart_frames:
                        waits = cur.execute("PRAGMA busy_timeout").fetchone()[0]
                        cur.execute(f"PRAGMA busy_timeout={int(self._restart_wait_ms)}")
                        try:
                            with self._write_lock:
                                cur.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                        finally:
                            cur.execute(f"PRAGMA busy_timeout={int(waits)}")
                except Exception:  # noqa: BLE001 - a failed checkpoint is retried next tick
                    log.warning("WAL checkpoint failed", exc_info=True)
            conn.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            log.warning("final WAL checkpoint failed", exc_info=True)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._worker.join(timeout=10)


@dataclass(frozen=True)
class SqlReadTx:
    """What :meth:`SqlStore.reading` offers: the approval tasks, read only."""

    tasks: Any


def _engine_for(parsed: URL, sync: str, lock_timeout_ms: int | None = None) -> Engine:
    """The engine for a parsed URL; ConfigError for an unsupported scheme.
    ``lock_timeout_ms``: how long a write waits for another connection's lock (None: the
    backend's :data:`DEFAULT_LOCK_TIMEOUT_MS`)."""
    shown = parsed.render_as_string(hide_password=True)
    if parsed.drivername in _PG_DRIVERS:
        return _postgres_engine(parsed, lock_timeout_ms)
    if parsed.drivername == "sqlite":
        try:
            return _sqlite_engine(parsed, sync, lock_timeout_ms)
        except OSError as exc:
            raise ConfigError(f"cannot create the database {shown}: {exc.strerror or exc}") from exc
    raise ConfigError(
        f"database URL scheme {parsed.drivername!r} is not supported; use sqlite:///PATH "
        "or postgresql://USER@HOST:PORT/DB"
    )


def current_revision(url: str) -> str | None:
    """The schema revision stored in the database at ``url`` (None when it has none).
    Raises ConfigError for an unsupported URL, SQLAlchemyError when it cannot be read."""
    parsed = parse_database_url(url)
    engine = _engine_for(parsed, "FULL")
    try:
        with engine.connect() as conn:
            return stored_revision(conn)
    finally:
        engine.dispose()


def open_store(
    url: str,
    *,
    sqlite_sync: str = "FULL",
    migrate: bool = True,
    pool_size: int = 4,
    lock_timeout_ms: int | None = None,
) -> SqlStore:
    """Open (and by default migrate) the store at ``url``.

    ``sqlite:///path/to/warden.db`` is the embedded default. Raises
    ``pool_size``: PostgreSQL connections kept for reads (``SqlStore.reading``).
    ``lock_timeout_ms``: how long a write waits for a lock another connection holds before
    it raises StoreUnavailable (None: 10 s on SQLite, 5 s on PostgreSQL). Raises
    :class:`ConfigError` for an unsupported URL or sync mode, or (``migrate=False``)
    a database whose schema is not this Warden's; :class:`StoreUnavailable` for a
    database that cannot be opened or migrated (damaged, not a database).
    """
    sync = sqlite_sync.upper()
    if sync not in SYNC_MODES:
        raise ConfigError(f"sqlite sync mode must be one of {SYNC_MODES}, got {sqlite_sync!r}")
    parsed = parse_database_url(url)
    shown = parsed.render_as_string(hide_password=True)
    engine = _engine_for(parsed, sync, lock_timeout_ms)
    try:
        if migrate:
            upgrade(engine)
        else:
            check_revision(engine)
        return SqlStore(engine, read_pool_size=pool_size)
    except BaseException as exc:
        engine.dispose()
        if isinstance(exc, WardenError) or not isinstance(exc, Exception):
            raise
        if isinstance(exc, sa_exc.SQLAlchemyError | engine.dialect.loaded_dbapi.Error):
            raise _open_failure(shown, getattr(exc, "orig", None) or exc) from exc
        raise
