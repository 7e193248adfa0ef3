"""schedule slots: one row per (repository, schedule, slot) that a beat tick claimed

Revision ID: 0013s
Revises: 0012t
Create Date: 2026-12-04 21:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013s"
down_revision = "0012t"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_slots",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("schedule", sa.String(40), nullable=False),
        sa.Column("slot", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("job_ids", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "schedule", "slot", name="uq_schedule_slots_slot"),
    )


def downgrade() -> None:
    op.drop_table("schedule_slots")
