"""insights: onloop's pull requests (opened, merged, closed, reverted) and the commits pushed
to their branches (rework), recorded from webhook deliveries for /insights

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "onloop_pulls",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("head_ref", sa.String(255), nullable=False),
        sa.Column("head_sha", sa.String(40), nullable=True),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("merged", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("merge_sha", sa.String(40), nullable=True),
        sa.Column("reverted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revert_sha", sa.String(40), nullable=True),
        sa.Column("rework_commits", sa.Integer(), nullable=True),
        sa.UniqueConstraint("repo", "number", name="uq_onloop_pulls_repo_number"),
    )
    op.create_index("ix_onloop_pulls_repo", "onloop_pulls", ["repo"])
    op.create_table(
        "onloop_branch_commits",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("sha", sa.String(40), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("pull_number", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "key", name="uq_onloop_branch_commits_key"),
    )
    op.create_index("ix_onloop_branch_commits_repo", "onloop_branch_commits", ["repo"])
    op.create_index("ix_onloop_branch_commits_sha", "onloop_branch_commits", ["sha"])


def downgrade() -> None:
    op.drop_index("ix_onloop_branch_commits_sha", "onloop_branch_commits")
    op.drop_index("ix_onloop_branch_commits_repo", "onloop_branch_commits")
    op.drop_table("onloop_branch_commits")
    op.drop_index("ix_onloop_pulls_repo", "onloop_pulls")
    op.drop_table("onloop_pulls")
