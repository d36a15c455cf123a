"""One reader over the transparency log for replay: from a store or from an export.

``warden whatif`` reads what the audit log recorded, never anything else: every entry
is a leaf of the transparency log (issue 17), and an ACS entry carries beside it the
canonical params its ``request_hash`` covers (the request as decided). A
:class:`LogReader` yields those leaves in log order (by ``log_index``; an entry that is
no leaf, written before migration 0010, follows in session order), the sessions they
belong to, the log events (non-entry leaves: starts, bundle loads, shadow divergences)
and the sources of the bundles the database stored (``policy_bundles``).

Two readers implement it: :class:`StoreLogReader` (a SQLite or PostgreSQL database,
read only) and :class:`ExportLogReader` (a ``warden export`` JSONL file; its ``log``
record gives the leaf indexes and, for a whole export, the events). Errors:
:class:`~warden.errors.StoreUnavailable` for a database that cannot be read,
:class:`~warden.errors.ConfigError` for an export file that cannot be read or parsed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine

from warden.errors import ConfigError, StoreUnavailable

_PAGE = 5_000


@dataclass(frozen=True)
class LoggedSession:
    """A session record: who it belongs to and what it negotiated (``negotiated.identity``
    says how its signer was verified)."""

    session_id: str
    agent_id: str
    key_id: str
    negotiated: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoggedEntry:
    """One entry leaf: its index (None: no leaf), session, seq, the entry (its stored
    text, or the parsed object an export held) and the canonical params text stored
    beside it (None for Warden-authored entries)."""

    log_index: int | None
    session_id: str
    seq: int
    entry: str | dict[str, Any]
    request: str | None


class LogReader(Protocol):
    """What replay reads. Every method reads; none writes."""

    #: ``store`` or ``export`` and where (a database URL without password, a file path).
    source: dict[str, str]

    def sessions(self) -> dict[str, LoggedSession]:
        """Every session record by id."""

    def entries(self) -> Iterator[LoggedEntry]:
        """Every entry in log order (see the module docstring)."""

    def events(self, kind_prefix: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
        """``(log_index, event)`` of the log events whose kind starts with
        ``kind_prefix``, in log order."""

    def bundle_sources(self) -> dict[str, str]:
        """The stored bundle sources by digest (empty for an export)."""

    def agents(self) -> dict[str, dict[str, Any]]:
        """The registry's agents as CEL ``agent`` facts by id (empty for an export): the
        fallback for an agent whose registration is not in the log."""


class StoreLogReader:
    """:class:`LogReader` over a database (``engine``), in short autocommit reads."""

    def __init__(self, engine: Engine, shown_url: str) -> None:
        self._engine = engine
        self.source = {"kind": "store", "where": shown_url}

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """One read on a raw connection in autocommit (``?`` placeholders): no write lock
        is taken, not even SQLite's ``BEGIN IMMEDIATE``."""
        from warden.store.policy_sql import read_rows

        try:
            return read_rows(self._engine, sql, params)
        except Exception as exc:  # noqa: BLE001 - the driver's error, named for the caller
            raise StoreUnavailable(f"cannot read the database ({exc})") from exc

    def sessions(self) -> dict[str, LoggedSession]:
        out: dict[str, LoggedSession] = {}
        for sid, agent, key, negotiated in self._rows(
            "SELECT session_id, agent_id, key_id, negotiated FROM sessions"
        ):
            try:
                neg = json.loads(negotiated) if negotiated else {}
            except ValueError:
                neg = {}
            out[str(sid)] = LoggedSession(str(sid), str(agent), str(key), neg)
        return out

    def _raw_page(self, at: int) -> list[Any]:
        """One page of entry rows from ``at`` on (replay's hot loop: no per-row SQLAlchemy
        objects), in its own short read."""
        return self._rows(
            "SELECT log_index, session_id, seq, entry, request FROM entries "
            f"WHERE log_index >= ? ORDER BY log_index LIMIT {_PAGE}",
            (at,),
        )

    def entries(self) -> Iterator[LoggedEntry]:
        at = 0
        while True:
            rows = self._raw_page(at)
            for r in rows:
                yield LoggedEntry(r[0], r[1], r[2], r[3], r[4])
            if len(rows) < _PAGE:
                break
            at = int(rows[-1][0]) + 1
        for r in self._rows(
            "SELECT log_index, session_id, seq, entry, request FROM entries "
            "WHERE log_index IS NULL ORDER BY session_id, seq"
        ):
            yield LoggedEntry(None, str(r[1]), int(r[2]), str(r[3]), r[4])

    def events(self, kind_prefix: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
        for index, event in self._rows(
            # LIKE narrows the read (its "_" matches any character); startswith decides.
            "SELECT log_index, event FROM log_events WHERE kind LIKE ? ORDER BY log_index",
            (kind_prefix + "%",),
        ):
            try:
                doc = json.loads(event)
            except ValueError:
                continue
            if isinstance(doc, dict) and str(doc.get("kind", "")).startswith(kind_prefix):
                yield int(index), doc

    def bundle_sources(self) -> dict[str, str]:
        from warden.store.policy_sql import bundle_sources

        try:
            return bundle_sources(self._engine)
        except Exception as exc:  # noqa: BLE001 - the driver's error, named for the caller
            raise StoreUnavailable(f"cannot read the stored bundles ({exc})") from exc

    def agents(self) -> dict[str, dict[str, Any]]:
        from warden.core.types import agent_facts

        out: dict[str, dict[str, Any]] = {}
        for agent_id, owner, groups, budgets in self._rows(
            "SELECT agent_id, owner, groups, budgets FROM agents"
        ):
            try:
                out[str(agent_id)] = agent_facts(
                    str(agent_id), str(owner), json.loads(groups), json.loads(budgets)
                )
            except ValueError:
                continue
        return out


class ExportLogReader:
    """:class:`LogReader` over a ``warden export`` JSONL file (read once, in memory)."""

    def __init__(self, path: Path) -> None:
        self.source = {"kind": "export", "where": str(path)}
        self._sessions: dict[str, LoggedSession] = {}
        self._entries: list[tuple[str, int, dict[str, Any], str | None]] = []
        self._log: dict[str, Any] | None = None
        try:
            with path.open(encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except ValueError as exc:
                        raise ConfigError(f"{path}:{number}: not JSON: {exc}") from exc
                    self._take(rec, path, number)
        except OSError as exc:
            raise ConfigError(f"cannot read the export {path}: {exc}") from exc

    def _take(self, rec: Any, path: Path, number: int) -> None:
        if not isinstance(rec, dict):
            raise ConfigError(f"{path}:{number}: a record must be a JSON object")
        kind = rec.get("kind")
        if kind == "session":
            sid = str(rec.get("session_id", ""))
            self._sessions[sid] = LoggedSession(
                sid,
                str(rec.get("agent_id", "")),
                str(rec.get("key_id", "")),
                rec.get("negotiated") or {},
            )
        elif kind == "entry":
            entry = rec.get("entry")
            if not isinstance(entry, dict):
                raise ConfigError(f"{path}:{number}: an entry record without its entry")
            request = rec.get("request")
            self._entries.append(
                (
                    str(rec.get("session_id", "")),
                    int(rec.get("seq", 0)),
                    entry,
                    request if isinstance(request, str) else None,
                )
            )
        elif kind == "log":
            self._log = rec

    def sessions(self) -> dict[str, LoggedSession]:
        return dict(self._sessions)

    def entries(self) -> Iterator[LoggedEntry]:
        indexes: dict[str, list[int | None]] = (self._log or {}).get("indexes") or {}

        def index_of(sid: str, seq: int) -> int | None:
            row = indexes.get(sid) or []
            return row[seq] if seq < len(row) else None

        keyed = [
            (index_of(sid, seq), sid, seq, entry, req) for sid, seq, entry, req in self._entries
        ]
        # Leaves by index; entries that are no leaf after them, in file (session) order.
        keyed.sort(key=lambda k: (k[0] is None, k[0] if k[0] is not None else 0))
        for index, sid, seq, entry, req in keyed:
            yield LoggedEntry(index, sid, seq, entry, req)

    def events(self, kind_prefix: str = "") -> Iterator[tuple[int, dict[str, Any]]]:
        for index, event in (self._log or {}).get("events") or []:
            try:
                doc = json.loads(event)
            except (TypeError, ValueError):
                continue
            if isinstance(doc, dict) and str(doc.get("kind", "")).startswith(kind_prefix):
                yield int(index), doc

    def bundle_sources(self) -> dict[str, str]:
        return {}

    def agents(self) -> dict[str, dict[str, Any]]:
        return {}
