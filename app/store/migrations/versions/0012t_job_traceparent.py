"""job traceparent: the W3C traceparent of the delivery span that made the job (traces on)

Revision ID: 0012t
Revises: 0011
Create Date: 2026-12-04 18:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012t"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("traceparent", sa.String(55), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("traceparent")
