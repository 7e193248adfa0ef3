"""job spend: agent tokens, estimated cost and sandbox time, for the daily budgets

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 06:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

COLUMNS = (
    ("agent_tokens_in", sa.Integer()),
    ("agent_tokens_out", sa.Integer()),
    ("cost_usd", sa.Float()),
    ("sandbox_seconds", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
