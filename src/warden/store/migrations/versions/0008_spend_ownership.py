"""Spend ownership (issue 14 item 1): ``budgets.principals`` (a JSON list of the
principals and ``group:<name>`` entries that may spend a budget on the spend wire) and
``reservations.principal`` / ``receipts.principal`` (the API key principal that took the
hold; NULL: owned by nobody).

Existing rows (docs/decisions.md, "Hardening (issue 14): spend ownership"): a budget
is bound to nobody (``[]``: readable by admin keys only, spendable by nobody) until the
budgets file or ``PUT /v1/budgets/{id}`` binds it — except an AdCP plan's budget, which
is bound to its plan's owner, as ``sync_plans`` binds new ones; a reservation or receipt
is owned by nobody (admin keys read it; nobody concludes it through the spend wire, and
a held one expires as before).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "budgets",
        sa.Column("principals", sa.Text, nullable=False, server_default=sa.text("'[]'")),
    )
    op.add_column("reservations", sa.Column("principal", sa.String(200), nullable=True))
    op.add_column("receipts", sa.Column("principal", sa.String(200), nullable=True))
    # A plan's principal is 1..200 of [A-Za-z0-9_.:@+-] (API key principals), so it
    # needs no JSON escaping between the quotes; || concatenates on both backends.
    op.execute(
        "UPDATE budgets SET principals = ("
        "SELECT '[\"' || p.principal || '\"]' FROM adcp_plans p "
        "WHERE p.budget_id = budgets.budget_id) "
        "WHERE budget_id IN (SELECT budget_id FROM adcp_plans)"
    )


def downgrade() -> None:
    op.drop_column("receipts", "principal")
    op.drop_column("reservations", "principal")
    op.drop_column("budgets", "principals")
