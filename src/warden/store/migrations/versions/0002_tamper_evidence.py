"""Tamper evidence: session signatures, the request as received, one entry per request.

- ``sessions.session_signature``: HMAC (session key) of the session record
  ``{kind, session_id, agent_id, key_id, created_at, negotiated}``, so editing a
  session row is detected. Rows written before this revision have none.
- ``entries.request``: the canonical params JSON the entry's ``request_hash`` was
  computed over (nullable: absent for older rows and for callers that do not pass it).
- ``uq_entries_session_step``: a unique index on ``entries(session_id, step_id)``
  (entries with an empty step id exempt), so a request whose replay keys were
  deleted still cannot be chained twice.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_STEP_WHERE = "step_id <> ''"


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("session_signature", sa.Text, nullable=True))
    with op.batch_alter_table("entries") as batch:
        batch.add_column(sa.Column("request", sa.Text, nullable=True))
    op.create_index(
        "uq_entries_session_step",
        "entries",
        ["session_id", "step_id"],
        unique=True,
        sqlite_where=sa.text(_STEP_WHERE),
        postgresql_where=sa.text(_STEP_WHERE),
    )


def downgrade() -> None:
    op.drop_index("uq_entries_session_step", table_name="entries")
    with op.batch_alter_table("entries") as batch:
        batch.drop_column("request")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("session_signature")
