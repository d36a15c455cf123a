"""The stored policy bundles and the active one (migration 0014; issue 19).

``policy_bundles`` keeps each bundle's source by content digest (written when a replica
starts with a bundle and when ``warden policy activate`` promotes one); ``policy_active``
is one row naming the bundle every replica serves. Writes go through a store write
transaction's cursor (so the activation, its source and its transparency-log event commit
together); reads run on a raw connection in autocommit (a replica's poll never takes
SQLite's write lock). Errors: the driver's, which callers turn into
:class:`~warden.errors.StoreUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine


@dataclass(frozen=True)
class ActiveBundle:
    """The ``policy_active`` row: the digest to serve, how many activations so far,
    when and by whom the latest was made."""

    digest: str
    generation: int
    activated_at: str
    activated_by: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def put_bundle(
    cur: Any, q: Callable[[str], str], digest: str, bundle_id: str, version: str, source: str
) -> None:
    """Store a bundle's source under its digest unless it is stored already."""
    cur.execute(
        q(
            "INSERT INTO policy_bundles (digest, bundle_id, version, source, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"
        ),
        (digest, bundle_id, version, source, _now()),
    )


def set_active(cur: Any, q: Callable[[str], str], digest: str, by: str) -> int:
    """Make ``digest`` (already stored) the bundle to serve; return the new generation."""
    cur.execute(q("SELECT generation FROM policy_active WHERE id = 1"))
    row = cur.fetchone()
    generation = (int(row[0]) if row is not None else 0) + 1
    if row is None:
        cur.execute(
            q(
                "INSERT INTO policy_active (id, digest, generation, activated_at, activated_by) "
                "VALUES (1, ?, ?, ?, ?)"
            ),
            (digest, generation, _now(), by),
        )
    else:
        cur.execute(
            q(
                "UPDATE policy_active SET digest = ?, generation = ?, activated_at = ?, "
                "activated_by = ? WHERE id = 1"
            ),
            (digest, generation, _now(), by),
        )
    return generation


def read_rows(engine: Engine, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Rows of one read on a raw connection in autocommit (on SQLite no ``BEGIN
    IMMEDIATE``: a poll never takes the write lock). ``?`` placeholders."""
    if engine.dialect.paramstyle != "qmark":
        sql = sql.replace("?", "%s")
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(sql, params)
        rows = list(cur.fetchall())
        cur.close()
        raw.commit()
        return rows
    finally:
        raw.close()


def active(engine: Engine) -> ActiveBundle | None:
    """The active bundle row, or None (no activation yet, or a database before 0014)."""
    try:
        rows = read_rows(
            engine,
            "SELECT digest, generation, activated_at, activated_by FROM policy_active WHERE id = 1",
        )
    except Exception as exc:
        if _missing_table(exc):
            return None
        raise
    if not rows:
        return None
    row = rows[0]
    return ActiveBundle(str(row[0]), int(row[1]), str(row[2]), str(row[3]))


def bundle_source(engine: Engine, digest: str) -> str | None:
    """The stored source of the bundle ``digest``, or None."""
    rows = read_rows(engine, "SELECT source FROM policy_bundles WHERE digest = ?", (digest,))
    return None if not rows else str(rows[0][0])


def bundle_sources(engine: Engine) -> dict[str, str]:
    """Every stored bundle's source by digest ({} on a database before 0014)."""
    try:
        return {
            str(r[0]): str(r[1])
            for r in read_rows(engine, "SELECT digest, source FROM policy_bundles")
        }
    except Exception as exc:
        if _missing_table(exc):
            return {}
        raise


def _missing_table(exc: Exception) -> bool:
    text_ = str(getattr(exc, "orig", None) or exc).lower()
    return "no such table" in text_ or "does not exist" in text_
