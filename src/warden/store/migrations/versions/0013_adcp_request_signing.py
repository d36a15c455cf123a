"""AdCP RFC 9421 signed requests (issue 21 item 3): ``adcp_signing_keys`` (each agent's
registered JWKs, by ``kid``) and ``adcp_signature_nonces`` (the replay cache of accepted
``(keyid, nonce)`` pairs, durable and shared by every replica).

Existing rows: none are touched; no agent has a signing key until one is registered
(``warden agents add-signing-key``), so unsigned AdCP calls authenticate as before.

Revision ID: 0013
Revises: 0010 (re-chained by the lead at merge)
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adcp_signing_keys",
        sa.Column("kid", sa.String(200), primary_key=True),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("jwk", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("revoked_at", sa.String(40), nullable=True),
    )
    op.create_index("ix_adcp_signing_keys_agent", "adcp_signing_keys", ["agent_id"])
    op.create_table(
        "adcp_signature_nonces",
        sa.Column("keyid", sa.String(200), nullable=False),
        sa.Column("nonce", sa.String(200), nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("keyid", "nonce", name="pk_adcp_signature_nonces"),
    )
    op.create_index(
        "ix_adcp_signature_nonces_expiry", "adcp_signature_nonces", ["keyid", "expires_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_adcp_signature_nonces_expiry", table_name="adcp_signature_nonces")
    op.drop_table("adcp_signature_nonces")
    op.drop_index("ix_adcp_signing_keys_agent", table_name="adcp_signing_keys")
    op.drop_table("adcp_signing_keys")
