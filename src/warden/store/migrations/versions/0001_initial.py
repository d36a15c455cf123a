"""Sessions, replay keys and audit entries (issue 2).

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("key_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("negotiated", sa.Text, nullable=False),
        sa.Column("closed", sa.Boolean, nullable=False),
        sa.Column("head_seq", sa.Integer, nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=True),
        sa.Column("head_signature", sa.Text, nullable=True),
    )
    op.create_table(
        "replay_keys",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("seen_at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "kind", "value", name="pk_replay_keys"),
    )
    op.create_table(
        "entries",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("entry_hash", sa.String(64), nullable=False),
        sa.Column("step_id", sa.Text, nullable=False),
        sa.Column("step_type", sa.Text, nullable=False),
        sa.Column("entry", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_entries"),
    )


def downgrade() -> None:
    op.drop_table("entries")
    op.drop_table("replay_keys")
    op.drop_table("sessions")
