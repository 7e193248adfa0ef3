"""job check run: the id of the check run `onloop/<kind>` a job opened, to conclude it later

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 06:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("check_run_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("check_run_id")
