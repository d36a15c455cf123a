"""Desk sessions on the server (issue 14): ``desk_sessions`` holds one row per logged-in
approval-desk session, keyed by the SHA-256 of the random session id its cookie
carries. Logging out deletes the row and revoking a key deletes all of the key's rows,
so a copied cookie stops working on every replica.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "desk_sessions",
        sa.Column("session_hash", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_desk_sessions_key", "desk_sessions", ["key_id"])
    op.create_index("ix_desk_sessions_expiry", "desk_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_desk_sessions_expiry", table_name="desk_sessions")
    op.drop_index("ix_desk_sessions_key", table_name="desk_sessions")
    op.drop_table("desk_sessions")
