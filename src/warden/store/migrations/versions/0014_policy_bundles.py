"""Stored policy bundles and the active one (issue 19): ``policy_bundles`` keeps the
source of every bundle a replica loaded or ``warden policy activate`` promoted, by
content digest, so ``warden whatif`` can re-run the bundle a recorded decision names;
``policy_active`` (one row, id 1) names the bundle every replica must serve, which each
replica polls and loads atomically.

Existing rows: none; a database without an active row serves the ``--policy`` file as
before.

Revision ID: 0014
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policy_bundles",
        sa.Column("digest", sa.String(80), primary_key=True),
        sa.Column("bundle_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "policy_active",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("digest", sa.String(80), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("activated_at", sa.String(40), nullable=False),
        sa.Column("activated_by", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("policy_active")
    op.drop_table("policy_bundles")
