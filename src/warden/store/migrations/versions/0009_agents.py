"""Agent identities (issue 15): ``agents`` (the registry: owner, groups, budgets,
revocation) and ``agent_keys`` (each agent's ACS key ids). No secret is stored: an
agent's key material is derived from the master IKM and the ``key_id``
(:mod:`warden.identity.agents`).

Existing rows: nothing is registered. Sessions created before the upgrade keep
verifying as before (their entries were signed under the master IKM's session keys, and
``warden verify`` tells them apart by the session record); new ACS sessions need a
registered agent's key (or ``--unsafe-shared-ikm``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(128), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("groups", sa.Text, nullable=False),
        sa.Column("budgets", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=True),
    )
    op.create_table(
        "agent_keys",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=True),
    )
    op.create_index("ix_agent_keys_agent", "agent_keys", ["agent_id"])


def downgrade() -> None:
    op.drop_index("ix_agent_keys_agent", table_name="agent_keys")
    op.drop_table("agent_keys")
    op.drop_table("agents")
