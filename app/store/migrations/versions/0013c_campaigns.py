"""campaigns: one change across many repositories, and the state of each repository

Revision ID: 0013c
Revises: 0013s
Create Date: 2026-12-04 21:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013c"
down_revision = "0013s"
branch_labels = None
depends_on = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=True),
        sa.Column("installation_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(16), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("issue_repo", sa.String(200), nullable=False),
        sa.Column("issue_number", sa.Integer(), nullable=True),
        sa.Column("advance_requested_at", WHEN, nullable=True),
        sa.Column("lease_until", WHEN, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_campaigns_advance_requested_at", "campaigns", ["advance_requested_at"])
    op.create_table(
        "campaign_repositories",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("campaign_id", sa.Integer(), sa.ForeignKey("campaigns.id"), nullable=False),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("pr_number", sa.Integer(), nullable=True),
        sa.Column("ci_state", sa.String(20), nullable=True),
        sa.Column("digest", sa.String(16), nullable=True),
        sa.Column("siblings", sa.String(64), nullable=True),
        sa.Column("rebase_of", sa.String(81), nullable=True),
        sa.Column("started_at", WHEN, nullable=True),
        sa.Column("updated_at", WHEN, nullable=False),
        sa.UniqueConstraint("campaign_id", "repo", name="uq_campaign_repositories"),
    )
    op.create_index(
        "ix_campaign_repositories_campaign_id", "campaign_repositories", ["campaign_id"]
    )


def downgrade() -> None:
    op.drop_table("campaign_repositories")
    op.drop_table("campaigns")
