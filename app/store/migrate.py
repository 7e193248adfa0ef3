"""`onloop db upgrade`: Alembic migrations run from the package, with onloop's database URL."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url

from app.core.logs import get_logger
from app.store.db import make_engine

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision`."""
    make_engine(url).dispose()  # creates the SQLite directory when needed
    before = current(url)
    command.upgrade(alembic_config(url), revision)
    after = current(url)
    if after != before:
        get_logger("onloop.db").info("database migrated", before=before, after=after)


def current(url: str) -> str | None:
    """The revision the database is at, or None before the first migration."""
    # Alembic says "Context impl …" and "Will assume …" at INFO each time: only its warnings
    # and the migrations it runs (upgrade logs them, in onloop's format) are news.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def describe(revision: str | None) -> str:
    """A revision with its name (the first line of its docstring): `0005 (job triggers)`."""
    if revision is None:
        return "none (empty database)"
    script = ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision)
    name = (script.doc or "").split(":", 1)[0].strip() if script is not None else ""
    return f"{revision} ({name})" if name else revision


def missing_sqlite_file(url: str) -> str | None:
    """The path of a SQLite database file that does not exist yet (or whose folder does not),
    else None: connecting would make an empty file and call it unmigrated."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return None if Path(parsed.database).exists() else parsed.database
