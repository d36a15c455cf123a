"""SQLAlchemy Core table definitions; the Alembic migrations create exactly these.

Migrations only ever add: 0001 created the three tables; 0002 added
``sessions.session_signature`` (the HMAC of the session record),
``entries.request`` (the canonical params the entry's ``request_hash`` covers)
and the unique index ``uq_entries_session_step`` (one entry per request id).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("negotiated", Text, nullable=False),
    Column("closed", Boolean, nullable=False, default=False),
    Column("head_seq", Integer, nullable=False, default=-1),
    Column("head_hash", String(64), nullable=True),
    Column("head_signature", Text, nullable=True),
    Column("session_signature", Text, nullable=True),
)

replay_keys = Table(
    "replay_keys",
    metadata,
    Column("session_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("value", String(128), nullable=False),
    Column("seen_at", String(40), nullable=False),
    PrimaryKeyConstraint("session_id", "kind", "value", name="pk_replay_keys"),
)

entries = Table(
    "entries",
    metadata,
    Column("session_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("entry_hash", String(64), nullable=False),
    Column("step_id", Text, nullable=False),
    Column("step_type", Text, nullable=False),
    Column("entry", Text, nullable=False),
    Column("response", Text, nullable=True),
    Column("created_at", String(40), nullable=False),
    Column("request", Text, nullable=True),
    PrimaryKeyConstraint("session_id", "seq", name="pk_entries"),
)

#: One chained entry per request id and session: a replayed request cannot be chained
#: twice even if its replay keys were deleted. Entries without a step id ("") are exempt.
STEP_INDEX_WHERE = "step_id <> ''"
Index(
    "uq_entries_session_step",
    entries.c.session_id,
    entries.c.step_id,
    unique=True,
    sqlite_where=text(STEP_INDEX_WHERE),
    postgresql_where=text(STEP_INDEX_WHERE),
)
