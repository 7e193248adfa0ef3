"""jobs list: an index on jobs.created_at, for /jobs newest first and its time filters

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 18:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_created_at", "jobs")
