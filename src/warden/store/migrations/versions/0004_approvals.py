"""The approval desk (issue 4): approval columns on ``tasks``, one row per approver
vote, API keys with roles, the webhook delivery outbox, and server secrets (the
approval desk's cookie key).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=True))
        batch.add_column(sa.Column("action_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("session_id", sa.String(255), nullable=True))
        batch.add_column(sa.Column("expires_at", sa.String(40), nullable=True))
        batch.add_column(sa.Column("approver_group", sa.String(128), nullable=True))
    op.create_index("ix_tasks_session_action", "tasks", ["session_id", "action_hash"])
    op.create_index("ix_tasks_state_expiry", "tasks", ["state", "expires_at"])
    op.create_table(
        "approval_votes",
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("decision", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "principal", name="pk_approval_votes"),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("groups", sa.Text, nullable=False),
        sa.Column("secret_hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=True),
    )
    op.create_index("uq_api_keys_secret_hash", "api_keys", ["secret_hash"], unique=True)
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(64), primary_key=True),
        sa.Column("webhook_id", sa.String(64), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.String(40), nullable=False),
        sa.Column("lease_until", sa.String(40), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("response_status", sa.Integer, nullable=True),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("delivered_at", sa.String(40), nullable=True),
    )
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index(
        "ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_attempt_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("server_secrets")
    op.drop_table("webhook_deliveries")
    op.drop_index("uq_api_keys_secret_hash", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("approval_votes")
    op.drop_index("ix_tasks_state_expiry", table_name="tasks")
    op.drop_index("ix_tasks_session_action", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        for name in ("approver_group", "expires_at", "session_id", "action_hash", "state"):
            batch.drop_column(name)
