"""The transparency log's tables (migration 0010), read and written off the hot path.

Leaves are the ``entries`` rows themselves (``log_index``; see
:meth:`warden.store.sql.SqlStore._leaf_index`); this module reads them in index order
for the tree builder and the verifier, and keeps the signed checkpoints and the
witnesses' cosignatures. Each call is its own short transaction on its own connection
(never the request path's connection). Errors: SQLAlchemy's, which callers turn into
:class:`~warden.errors.StoreUnavailable` where a request is waiting.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, text

_PAGE = 10_000


@dataclass(frozen=True)
class StoredCheckpoint:
    """One row of ``log_checkpoints``: the signed note and what it says."""

    tree_size: int
    root_hash: str
    note: str
    created_at: str


@dataclass(frozen=True)
class StoredCosignature:
    """One witness's cosignature line on the checkpoint of ``tree_size``."""

    tree_size: int
    witness: str
    key_id: str
    line: str
    timestamp: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iter_leaves(engine: Engine, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """``(log_index, bytes)`` of every leaf (entry rows and ``log_events`` rows) from
    ``start`` on, by index (:func:`iter_leaf_pages`, flattened)."""
    return itertools.chain.from_iterable(iter_leaf_pages(engine, start))


def iter_leaf_pages(engine: Engine, start: int = 0) -> Iterator[list[tuple[int, bytes]]]:
    """The leaves from ``start`` on, by index, in pages (lists) of up to a few thousand:
    each table is read in index order on the raw DB-API cursor (no per-row SQLAlchemy
    objects: this is the verifier's hot loop) and the two streams are merged page by page
    (a C sort of two sorted runs, not a per-row merge in Python). The bytes are the stored
    column's UTF-8, converted by the database (no decode and re-encode in Python)."""
    entries = _table_leaves(engine, "entries", "entry", start)
    events = _table_leaves(engine, "log_events", "event", start)
    a, b = next(entries, None), next(events, None)
    while a or b:
        if not b:
            assert a is not None
            yield a
            a = next(entries, None)
            continue
        if not a:
            yield b
            b = next(events, None)
            continue
        # Both have rows: everything up to the smaller of the two last indexes is known.
        limit = min(a[-1][0], b[-1][0])
        ia = bisect.bisect_right(a, limit, key=_index)
        ib = bisect.bisect_right(b, limit, key=_index)
        yield sorted(a[:ia] + b[:ib])
        a = a[ia:] or next(entries, None)
        b = b[ib:] or next(events, None)


def _index(row: tuple[int, bytes]) -> int:
    return row[0]


def _table_leaves(engine: Engine, table: str, column: str, start: int) -> Iterator[Any]:
    """One table's leaves from ``start`` on, a page (list) at a time, paged by index range
    (no long snapshot)."""
    qmark = engine.dialect.paramstyle == "qmark"
    mark = "?" if qmark else "%s"
    as_bytes = f"CAST({column} AS BLOB)" if qmark else f"convert_to({column}, 'UTF8')"
    sql = (
        f"SELECT log_index, {as_bytes} FROM {table} WHERE log_index >= {mark} "
        f"ORDER BY log_index LIMIT {_PAGE}"
    )
    at = start
    while True:
        raw = engine.raw_connection()
        try:
            cur = raw.cursor()
            cur.execute(sql, (at,))
            rows = cur.fetchall()
            cur.close()
            raw.commit()
        finally:
            raw.close()
        if not rows:
            return
        yield rows
        at = int(rows[-1][0]) + 1
        if len(rows) < _PAGE:
            return


def unindexed_entries(engine: Engine) -> list[tuple[Any, Any]]:
    """Up to 10 ``(session_id, seq)`` of entries that are no leaf (``log_index`` NULL)."""
    with engine.connect() as conn:
        return [
            (r[0], r[1])
            for r in conn.execute(
                text(
                    "SELECT session_id, seq FROM entries WHERE log_index IS NULL "
                    "ORDER BY session_id, seq LIMIT 10"
                )
            )
        ]


def next_index(engine: Engine) -> int | None:
    """``log_state.next_index`` (None if the row is gone)."""
    with engine.connect() as conn:
        row = conn.execute(text("SELECT next_index FROM log_state WHERE id = 1")).first()
    return int(row[0]) if row is not None else None


def put_checkpoint(engine: Engine, tree_size: int, root_hash: str, note: str) -> bool:
    """Store a signed checkpoint unless one of that size exists (another replica's, which
    must then have the same root: the caller compares). True if this one was stored."""
    with engine.begin() as conn:
        result = conn.execute(
            text(
                "INSERT INTO log_checkpoints (tree_size, root_hash, note, created_at) "
                "VALUES (:s, :r, :n, :c) ON CONFLICT (tree_size) DO NOTHING"
            ),
            {"s": tree_size, "r": root_hash, "n": note, "c": _now()},
        )
        return bool(result.rowcount == 1)


def _checkpoint(row: Any) -> StoredCheckpoint:
    return StoredCheckpoint(int(row[0]), row[1], row[2], row[3])


_CP_COLUMNS = "tree_size, root_hash, note, created_at"


def latest_checkpoint(engine: Engine) -> StoredCheckpoint | None:
    """The checkpoint of the largest tree, or None."""
    with engine.connect() as conn:
        row = conn.execute(
            text(f"SELECT {_CP_COLUMNS} FROM log_checkpoints ORDER BY tree_size DESC LIMIT 1")
        ).first()
    return _checkpoint(row) if row is not None else None


def checkpoint_at(engine: Engine, tree_size: int) -> StoredCheckpoint | None:
    """The checkpoint of exactly ``tree_size`` leaves, or None."""
    with engine.connect() as conn:
        row = conn.execute(
            text(f"SELECT {_CP_COLUMNS} FROM log_checkpoints WHERE tree_size = :s"),
            {"s": tree_size},
        ).first()
    return _checkpoint(row) if row is not None else None


def all_checkpoints(engine: Engine) -> list[StoredCheckpoint]:
    """Every stored checkpoint, smallest tree first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT {_CP_COLUMNS} FROM log_checkpoints ORDER BY tree_size")
        ).all()
    return [_checkpoint(r) for r in rows]


def put_cosignature(engine: Engine, sig: StoredCosignature) -> bool:
    """Store a cosignature unless that witness key already cosigned that size."""
    with engine.begin() as conn:
        result = conn.execute(
            text(
                "INSERT INTO log_cosignatures (tree_size, witness, key_id, line, timestamp, "
                "received_at) VALUES (:s, :w, :k, :l, :t, :r) "
                "ON CONFLICT (tree_size, witness, key_id) DO NOTHING"
            ),
            {
                "s": sig.tree_size,
                "w": sig.witness,
                "k": sig.key_id,
                "l": sig.line,
                "t": sig.timestamp,
                "r": _now(),
            },
        )
        return bool(result.rowcount == 1)


def cosignatures(engine: Engine, tree_size: int) -> list[StoredCosignature]:
    """The cosignatures stored for the checkpoint of ``tree_size``."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT tree_size, witness, key_id, line, timestamp FROM log_cosignatures "
                "WHERE tree_size = :s ORDER BY witness, key_id"
            ),
            {"s": tree_size},
        ).all()
    return [StoredCosignature(int(r[0]), r[1], r[2], r[3], int(r[4])) for r in rows]


def cosigned_sizes(engine: Engine, min_witnesses: int) -> list[int]:
    """Tree sizes with at least ``min_witnesses`` distinct cosigning keys, largest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT tree_size FROM log_cosignatures GROUP BY tree_size "
                "HAVING COUNT(*) >= :k ORDER BY tree_size DESC LIMIT 1"
            ),
            {"k": min_witnesses},
        ).all()
    return [int(r[0]) for r in rows]
