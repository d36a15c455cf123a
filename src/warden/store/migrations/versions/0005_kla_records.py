"""AI agent action requests (issue 5): ``kla_records`` holds every action request
received (as its RFC 8785 canonical JSON) and every policy decision, approval event and
audit event Warden wrote for one, with digest, detached signature and status.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kla_records",
        sa.Column("record_id", sa.String(256), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("action_request_id", sa.String(256), nullable=True),
        sa.Column("execution_id", sa.String(256), nullable=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("signature", sa.Text, nullable=True),
        sa.Column("kid", sa.String(256), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_kla_records_execution", "kla_records", ["execution_id"])
    op.create_index("ix_kla_records_request", "kla_records", ["action_request_id"])


def downgrade() -> None:
    op.drop_index("ix_kla_records_request", table_name="kla_records")
    op.drop_index("ix_kla_records_execution", table_name="kla_records")
    op.drop_table("kla_records")
