"""What the `onloop` commands share: settings or exit 2, the database checks, `--since`."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import click
from pydantic import ValidationError

from app.core.settings import Settings, load_settings
from app.policy.org_config import OrgConfigError, check_file
from app.store import migrate
from app.store.db import Database


def settings_or_exit(required: tuple[str, ...] = ()) -> Settings:
    """Build the settings once; on any problem print every bad name (never a value), exit 2."""
    try:
        settings = load_settings()
    except ValidationError as exc:
        # Never print e["input"]: it may be a secret.
        lines = [
            f"  ONLOOP_{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors() if e["loc"]
        ]
        click.echo("onloop: invalid settings:\n" + "\n".join(lines), err=True)
        sys.exit(2)
    missing = settings.missing(required)
    if missing:
        click.echo(
            "onloop: missing required settings: " + ", ".join(missing) + "\n"
            "Set them in the environment or in a .env file (see README, 'Settings').",
            err=True,
        )
        sys.exit(2)
    return settings


def check_migrated(settings: Settings) -> None:
    """Exit 2 unless the database is reachable and at the code's migration head."""
    try:
        at, head = migrate.current(settings.database_url), migrate.head()
    except Exception as exc:
        click.echo(f"onloop: cannot reach the database: {type(exc).__name__}", err=True)
        sys.exit(2)
    if at != head:
        click.echo(
            f"onloop: the database is at {at}, not {head}: run `onloop db upgrade`", err=True
        )
        sys.exit(2)


def migrated_database() -> Database:
    """The database of the settings, once it is known to be migrated (else exit 2)."""
    settings = settings_or_exit()
    check_migrated(settings)
    return Database(settings.database_url)


def check_org_file(settings: Settings) -> None:
    """Refuse to start on a missing or invalid ONLOOP_CONFIG_FILE, in one line naming the file
    and the line, rather than failing every job later."""
    if settings.config_file is None:
        return
    try:
        check_file(settings.config_file)
    except OrgConfigError as exc:
        click.echo(f"onloop: ONLOOP_CONFIG_FILE {exc}", err=True)
        sys.exit(2)


def parse_since(text: str) -> datetime:
    """`--since 30m`, `24h` or `7d` as the aware UTC time that long ago."""
    units = {"m": "minutes", "h": "hours", "d": "days"}
    try:
        amount, unit = int(text[:-1]), units[text[-1]]
    except (ValueError, KeyError, IndexError):
        raise click.BadParameter("use a number and m, h or d, e.g. 24h") from None
    return datetime.now(UTC) - timedelta(**{unit: amount})
