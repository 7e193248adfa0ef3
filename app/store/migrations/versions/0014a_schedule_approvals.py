"""schedule approvals: a schedule's owner consents to it, as it is, before it runs

Revision ID: 0014a
Revises: 0013c
Create Date: 2026-12-05 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014a"
down_revision = "0013c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_approvals",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("schedule", sa.String(40), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "schedule", "digest", name="uq_schedule_approvals_digest"),
    )


def downgrade() -> None:
    op.drop_table("schedule_approvals")
