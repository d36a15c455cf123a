"""SQLAlchemy Core table definitions; the Alembic migrations create exactly these."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
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
    PrimaryKeyConstraint("session_id", "seq", name="pk_entries"),
)
