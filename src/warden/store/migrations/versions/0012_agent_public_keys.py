"""Agent public keys and record signatures beside Ed25519 (issue 21, ACS-Crypto):
``agent_keys.algorithm``, ``agent_keys.public_key`` and ``kla_records.signatures``.

A key row with an ``algorithm`` (``ML-DSA-65``, ``ECDSA-P256`` …) is an asymmetric key:
its ``public_key`` is the base64 DER SubjectPublicKeyInfo the agent registered, and
Warden verifies the agent's signatures with it. A row without one is an HMAC key whose
material is derived from the master IKM, as before.

``kla_records.signatures`` holds a record's signatures other than the Ed25519 one in
``signature``/``kid`` (JSON ``[{alg, kid, signature}]``; ML-DSA-65 when the setting
``evidence_signing_keys`` names it).

Existing rows: every new column NULL, i.e. HMAC keys and Ed25519-only records; nothing
changes for them.

Revision ID: 0012
Revises: 0010 (the lead re-chains parallel migrations at merge)
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_keys") as batch:
        batch.add_column(sa.Column("algorithm", sa.String(32), nullable=True))
        batch.add_column(sa.Column("public_key", sa.Text, nullable=True))
    with op.batch_alter_table("kla_records") as batch:
        batch.add_column(sa.Column("signatures", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kla_records") as batch:
        batch.drop_column("signatures")
    with op.batch_alter_table("agent_keys") as batch:
        batch.drop_column("public_key")
        batch.drop_column("algorithm")
