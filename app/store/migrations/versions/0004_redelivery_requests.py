"""redelivery requests: the GUIDs onloop asked GitHub to send again

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "redelivery_requests",
        sa.Column("guid", sa.String(length=64), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("guid"),
    )


def downgrade() -> None:
    op.drop_table("redelivery_requests")
