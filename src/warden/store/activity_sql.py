"""Read queries of the desk's operator view (issue 18 item 4): audit entries newest
first across every chain (agents' ACS sessions and Warden's own chains: spend, KLA,
approval desk, agents, AdCP), sessions, one entry with its neighbours for link
verification, held reservations and the spend chain's settlements. Nothing here writes.

Every query is bounded by a ``LIMIT`` the caller gives and runs on the store's own
connection under its lock (:func:`~warden.store.api_keys_sql.read_cursor`), like the
other reads. Entries are ordered by ``(created_at, session_id, seq)`` descending, the
store's own UTC timestamp (RFC 3339 with ``Z``, so text order is time order), with a
keyset cursor for the next page. Text filters are a coarse ``LIKE`` over the stored
entry and request JSON (what narrows the scan); the caller checks every row exactly.

Raises :class:`~warden.errors.StoreUnavailable` as the store's other reads do, and
:class:`~warden.errors.IntegrityError` when a row cannot be turned into its export
record (:func:`entry_chain`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from warden.store.api_keys_sql import read_cursor

if TYPE_CHECKING:
    from warden.store.sql import SqlStore

#: The ``LIKE`` escape character of :func:`entries_page`'s text filters.
_ESCAPE = "!"


@dataclass(frozen=True)
class EntryCursor:
    """Where a page of entries ended: the last row's ``created_at``, session and seq."""

    created_at: str
    session_id: str
    seq: int


@dataclass(frozen=True)
class StoredEntry:
    """One entry row as stored: the JSON texts unparsed (the caller parses leniently).

    ``agent_id`` is the session's (``warden-<kind>:<name>`` on Warden's chains);
    ``created_at`` the store's RFC 3339 UTC write time.
    """

    session_id: str
    seq: int
    created_at: str
    step_type: str
    agent_id: str
    entry: str
    request: str | None


@dataclass(frozen=True)
class SessionRow:
    """One session: ``entries`` is ``head_seq + 1``; ``negotiated`` its JSON text."""

    session_id: str
    agent_id: str
    key_id: str
    created_at: str
    entries: int
    closed: bool
    negotiated: str


@dataclass(frozen=True)
class EntryChain:
    """One entry and what verifying its link needs, as export records
    (:mod:`warden.ledger.records`): the session, the entries before and after it (None at
    either end), the session's head (None when it has no entries) and the entry's
    stored wire ``response`` (inside ``record``)."""

    session: dict[str, Any]
    previous: dict[str, Any] | None
    record: dict[str, Any]
    following: dict[str, Any] | None
    head: dict[str, Any] | None
    created_at: str


@dataclass(frozen=True)
class HeldReservation:
    """A hold still ``held``: its stored record's JSON text (amount, currency, action)."""

    reservation_id: str
    budget_id: str
    expires_at: str
    principal: str | None
    record: str


def like_pattern(text: str) -> str:
    """``%text%`` with ``LIKE``'s wildcards escaped (escape character ``!``)."""
    escaped = text.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%")
    return "%" + escaped.replace("_", _ESCAPE + "_") + "%"


def entries_page(
    store: SqlStore,
    *,
    limit: int,
    before: EntryCursor | None = None,
    since: str | None = None,
    until: str | None = None,
    contains: Sequence[str] = (),
    step_prefix: str | None = None,
    session_id: str | None = None,
    agent: str | None = None,
) -> list[StoredEntry]:
    """Up to ``limit`` entries, newest first, strictly older than ``before``.

    ``since``/``until`` bound ``created_at`` (RFC 3339 UTC text, ``since`` inclusive,
    ``until`` exclusive); each text in ``contains`` must occur in the entry or its
    stored request (a coarse prefilter: the caller checks the parsed row exactly);
    ``step_prefix`` keeps step types starting with it (``warden/approval.``);
    ``session_id`` keeps one session's entries; ``agent`` keeps the entries of that
    agent's sessions and those whose entry or request text contains it (Warden's chains
    name the agent inside the entry; again a coarse prefilter).
    """
    where: list[str] = []
    args: list[Any] = []
    if before is not None:
        where.append(
            "(e.created_at < ? OR (e.created_at = ? AND (e.session_id < ? OR "
            "(e.session_id = ? AND e.seq < ?))))"
        )
        args += [
            before.created_at,
            before.created_at,
            before.session_id,
            before.session_id,
            before.seq,
        ]
    if session_id is not None:
        where.append("e.session_id = ?")
        args.append(session_id)
    if since is not None:
        where.append("e.created_at >= ?")
        args.append(since)
    if until is not None:
        where.append("e.created_at < ?")
        args.append(until)
    for text in contains:
        pattern = like_pattern(text)
        where.append(
            f"(e.entry LIKE ? ESCAPE '{_ESCAPE}' OR "
            f"(e.request IS NOT NULL AND e.request LIKE ? ESCAPE '{_ESCAPE}'))"
        )
        args += [pattern, pattern]
    if agent is not None:
        pattern = like_pattern(agent)
        where.append(
            f"(s.agent_id = ? OR e.entry LIKE ? ESCAPE '{_ESCAPE}' OR "
            f"(e.request IS NOT NULL AND e.request LIKE ? ESCAPE '{_ESCAPE}'))"
        )
        args += [agent, pattern, pattern]
    if step_prefix is not None:
        where.append(f"e.step_type LIKE ? ESCAPE '{_ESCAPE}'")
        args.append(like_pattern(step_prefix)[1:])  # a prefix: no leading %
    sql = (
        "SELECT e.session_id, e.seq, e.created_at, e.step_type, s.agent_id, e.entry, "
        "e.request FROM entries e JOIN sessions s ON s.session_id = e.session_id"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY e.created_at DESC, e.session_id DESC, e.seq DESC LIMIT ?"
    )
    args.append(limit)
    with read_cursor(store) as cur:
        cur.execute(store._q(sql), tuple(args))  # noqa: SLF001 - same package
        rows = cur.fetchall()
    return [
        StoredEntry(
            session_id=str(r[0]),
            seq=int(r[1]),
            created_at=str(r[2]),
            step_type=str(r[3]),
            agent_id=str(r[4]),
            entry=r[5] if isinstance(r[5], str) else "",
            request=r[6] if isinstance(r[6], str) else None,
        )
        for r in rows
    ]


def recent_sessions(
    store: SqlStore, *, limit: int, agent_id: str | None = None
) -> list[SessionRow]:
    """Up to ``limit`` sessions, newest first (of ``agent_id`` only, when given)."""
    sql = (
        "SELECT session_id, agent_id, key_id, created_at, head_seq, closed, negotiated "
        "FROM sessions"
        + (" WHERE agent_id = ?" if agent_id is not None else "")
        + " ORDER BY created_at DESC, session_id DESC LIMIT ?"
    )
    args: tuple[Any, ...] = (agent_id, limit) if agent_id is not None else (limit,)
    with read_cursor(store) as cur:
        cur.execute(store._q(sql), args)  # noqa: SLF001
        rows = cur.fetchall()
    return [
        SessionRow(
            session_id=str(r[0]),
            agent_id=str(r[1]),
            key_id=str(r[2]),
            created_at=str(r[3]),
            entries=int(r[4]) + 1,
            closed=bool(r[5]),
            negotiated=r[6] if isinstance(r[6], str) else "",
        )
        for r in rows
    ]


def sessions_spelled(store: SqlStore, uuid_key: str, *, limit: int = 5) -> list[str]:
    """The stored session ids that are ``uuid_key`` (a lowercase UUID) in any case, at
    most ``limit``, in id order: an ACS session keeps the id as its agent wrote it
    (it is the HKDF ``info`` of the session key), so an upper-case one is stored so."""
    sql = "SELECT session_id FROM sessions WHERE lower(session_id) = ? ORDER BY session_id LIMIT ?"
    with read_cursor(store) as cur:
        cur.execute(store._q(sql), (uuid_key, limit))  # noqa: SLF001
        return [str(r[0]) for r in cur.fetchall()]


_SESSION_COLUMNS = (
    "session_id",
    "agent_id",
    "key_id",
    "created_at",
    "negotiated",
    "session_signature",
    "head_seq",
    "head_hash",
    "head_signature",
    "closed",
)
_ENTRY_COLUMNS = ("seq", "entry_hash", "step_id", "step_type", "entry", "response", "request")


def entry_chain(store: SqlStore, session_id: str, seq: int) -> EntryChain | None:
    """Entry ``seq`` of ``session_id`` with its session, neighbours and head as export
    records, or None when there is no such entry. Rows are turned into records by the
    store's own export code, so a damaged row raises
    :class:`~warden.errors.IntegrityError` exactly as ``warden export`` would."""
    from warden.store.sql import SqlStore as _Sql

    with read_cursor(store) as cur:
        cur.execute(
            store._q(  # noqa: SLF001
                f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions WHERE session_id = ?"
            ),
            (session_id,),
        )
        srow = cur.fetchone()
        if srow is None:
            return None
        cur.execute(
            store._q(  # noqa: SLF001
                f"SELECT {', '.join(_ENTRY_COLUMNS)}, created_at FROM entries "
                "WHERE session_id = ? AND seq BETWEEN ? AND ? ORDER BY seq"
            ),
            (session_id, seq - 1, seq + 1),
        )
        erows = cur.fetchall()
    session = SimpleNamespace(**dict(zip(_SESSION_COLUMNS, srow, strict=True)))
    by_seq = {
        int(r[0]): SimpleNamespace(**dict(zip(_ENTRY_COLUMNS, r[:-1], strict=True))) for r in erows
    }
    created = {int(r[0]): str(r[-1]) for r in erows}
    if seq not in by_seq:
        return None

    def record(n: int) -> dict[str, Any] | None:
        row = by_seq.get(n)
        return _Sql._entry_record(session_id, row) if row is not None else None  # noqa: SLF001

    this = record(seq)
    assert this is not None
    return EntryChain(
        session=_Sql._session_record(session),  # noqa: SLF001
        previous=record(seq - 1),
        record=this,
        following=record(seq + 1),
        head=_Sql._head_record(session),  # noqa: SLF001
        created_at=created[seq],
    )


def held_reservations(store: SqlStore, *, limit: int) -> list[HeldReservation]:
    """Up to ``limit`` holds still ``held``, soonest expiry first."""
    with read_cursor(store) as cur:
        cur.execute(
            store._q(  # noqa: SLF001
                "SELECT reservation_id, budget_id, expires_at, principal, record "
                "FROM reservations WHERE status = 'held' ORDER BY expires_at LIMIT ?"
            ),
            (limit,),
        )
        rows = cur.fetchall()
    return [
        HeldReservation(
            str(r[0]), str(r[1]), str(r[2]), r[3], r[4] if isinstance(r[4], str) else ""
        )
        for r in rows
    ]


def spend_events_since(store: SqlStore, since: str, *, limit: int) -> list[StoredEntry]:
    """Up to ``limit`` entries of the spend chains (``warden/spend.*``) written at or
    after ``since``, newest first: what the burn charts add up."""
    return entries_page(store, limit=limit, since=since, step_prefix="warden/spend.")
