"""The Alembic migrations build exactly the tables the models describe, on either database."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from app.store import fleet_tables, migrate
from app.store.db import Database
from app.store.models import Base

assert fleet_tables.Campaign.metadata is Base.metadata  # its tables are Base's


def test_migrated_schema_matches_the_models(db: Database) -> None:
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    assert migrate.current(db.url) == migrate.head()
