"""Budgets, their per-period usage, reservations, receipts; the idempotency store
and tasks (issue 3).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("budget_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("parent_id", sa.String(64), nullable=True),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("cap", sa.Text, nullable=False),
        sa.Column("period", sa.String(8), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "budget_usage",
        sa.Column("budget_id", sa.String(64), nullable=False),
        sa.Column("bucket", sa.String(16), nullable=False),
        sa.Column("reserved", sa.Text, nullable=False),
        sa.Column("settled", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("budget_id", "bucket", name="pk_budget_usage"),
    )
    op.create_table(
        "reservations",
        sa.Column("reservation_id", sa.String(64), primary_key=True),
        sa.Column("budget_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
    )
    op.create_index("ix_reservations_held_expiry", "reservations", ["status", "expires_at"])
    op.create_table(
        "receipts",
        sa.Column("receipt_id", sa.String(64), primary_key=True),
        sa.Column("reservation_id", sa.String(64), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(200), nullable=False),
        sa.Column("idem_key", sa.String(255), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("scope", "idem_key", name="pk_idempotency_keys"),
    )
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tasks")
    op.drop_table("idempotency_keys")
    op.drop_table("receipts")
    op.drop_index("ix_reservations_held_expiry", table_name="reservations")
    op.drop_table("reservations")
    op.drop_table("budget_usage")
    op.drop_table("budgets")
