"""AdCP governance agent (issue 9): ``adcp_plans`` (synced campaign plans, one row per
caller and plan), ``adcp_checks`` (every check_governance verdict, with the budget
reservation an approval holds and the desk task a human review waits on) and
``adcp_outcomes`` (report_plan_outcome; ``settles`` is unique, so an action has at most
one terminal settlement whatever the races) and ``adcp_adjustments``
(report_plan_adjustment: decommitments, refunds, credits and makegoods, reported then
reviewed).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "adcp_plans",
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("plan_id", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("budget_id", sa.String(64), nullable=False),
        sa.Column("plan_hash", sa.String(64), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("principal", "plan_id", name="pk_adcp_plans"),
    )
    op.create_table(
        "adcp_checks",
        sa.Column("check_id", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("plan_id", sa.String(255), nullable=False),
        sa.Column("check_type", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=True),
        sa.Column("reservation_id", sa.String(64), nullable=True),
        sa.Column("task_id", sa.String(64), nullable=True),
        sa.Column("consultation_context", sa.String(255), nullable=True),
        sa.Column("jti", sa.String(64), nullable=True),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_adcp_checks_plan", "adcp_checks", ["principal", "plan_id", "created_at"])
    op.create_index("ix_adcp_checks_task", "adcp_checks", ["task_id"])
    op.create_index("uq_adcp_checks_jti", "adcp_checks", ["jti"], unique=True)
    op.create_index(
        "uq_adcp_checks_consultation", "adcp_checks", ["consultation_context"], unique=True
    )
    op.create_table(
        "adcp_outcomes",
        sa.Column("outcome_id", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("plan_id", sa.String(255), nullable=False),
        sa.Column("check_id", sa.String(64), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("settles", sa.String(64), nullable=True),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index(
        "ix_adcp_outcomes_plan", "adcp_outcomes", ["principal", "plan_id", "created_at"]
    )
    op.create_index("uq_adcp_outcomes_settles", "adcp_outcomes", ["settles"], unique=True)
    op.create_table(
        "adcp_adjustments",
        sa.Column("adjustment_id", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("plan_id", sa.String(255), nullable=False),
        sa.Column("outcome_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index(
        "ix_adcp_adjustments_plan", "adcp_adjustments", ["principal", "plan_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_adcp_adjustments_plan", table_name="adcp_adjustments")
    op.drop_table("adcp_adjustments")
    op.drop_index("uq_adcp_outcomes_settles", table_name="adcp_outcomes")
    op.drop_index("ix_adcp_outcomes_plan", table_name="adcp_outcomes")
    op.drop_table("adcp_outcomes")
    op.drop_index("uq_adcp_checks_consultation", table_name="adcp_checks")
    op.drop_index("uq_adcp_checks_jti", table_name="adcp_checks")
    op.drop_index("ix_adcp_checks_task", table_name="adcp_checks")
    op.drop_index("ix_adcp_checks_plan", table_name="adcp_checks")
    op.drop_table("adcp_checks")
    op.drop_table("adcp_plans")
