"""job triggers: the comment or label that started work, so it starts work once

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 15:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_triggers",
        sa.Column("trigger_key", sa.String(length=400), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["delivery_id"], ["deliveries.id"]),
        sa.PrimaryKeyConstraint("trigger_key"),
    )


def downgrade() -> None:
    op.drop_table("job_triggers")
