"""KLA records are keyed per principal (issue 16, eighth session; decision 970):
``kla_records``'s primary key becomes ``(principal, record_id)`` instead of
``record_id``.

An action request's row has the caller's ``action_request_id`` as its ``record_id``, so a
key on ``record_id`` alone made the id unique across every principal: a second principal
reusing one was refused ``409 record:conflict`` and learned that it exists. Keyed per
principal, each principal's ids are its own. Every other record's id (``pd_…``,
``ae_…``, ``au_…``, ``held_…``) is Warden's and stays unique in practice.

Existing rows: unchanged (a key unique on ``record_id`` is unique on the pair).
SQLite cannot alter a primary key, so the table is rebuilt (Alembic's batch mode, which
copies the rows and recreates the indexes); PostgreSQL drops and adds the constraint.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_PK = "pk_kla_records"


def _table(columns: list[str], name: str) -> sa.Table:
    """``kla_records`` as it stands after 0012, keyed by ``columns``: the shape batch
    mode rebuilds the SQLite table in (the rows are copied by column name)."""
    table = sa.Table(
        "kla_records",
        sa.MetaData(),
        sa.Column("record_id", sa.String(256), nullable=False),
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
        sa.Column("signatures", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint(*columns, name=name),
    )
    sa.Index("ix_kla_records_execution", table.c.execution_id)
    sa.Index("ix_kla_records_request", table.c.action_request_id)
    return table


def _rekey(columns: list[str], drop: str | None, name: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(drop or "kla_records_pkey", "kla_records", type_="primary")
        op.create_primary_key(name, "kla_records", columns)
    else:
        with op.batch_alter_table(
            "kla_records", recreate="always", copy_from=_table(columns, name)
        ):
            pass


def upgrade() -> None:
    _rekey(["principal", "record_id"], None, _PK)


def downgrade() -> None:
    # Fails if two principals now share a record_id: their rows cannot both be kept.
    _rekey(["record_id"], _PK, "kla_records_pkey")
