"""job output: sandbox output kept for the job page, capped per job and purged by age

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_output",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.String(64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("marker", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index("ix_job_output_job_id", "job_output", ["job_id"])
    op.create_index("ix_job_output_at", "job_output", ["at"])


def downgrade() -> None:
    op.drop_index("ix_job_output_at", "job_output")
    op.drop_index("ix_job_output_job_id", "job_output")
    op.drop_table("job_output")
