"""A push to a repository's default branch may change `.github/onloop.yml`: its cached copy
is marked stale in the delivery's own transaction (from the payload alone, no GitHub call),
so beat's schedule tick reads it again at once (tasks/queue/schedule_configs.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from app.intake.events import Event
from app.store.fastsql import Sql

if TYPE_CHECKING:
    from app.intake.record import Cursor

HEADS = "refs/heads/"
LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)  # older than any refresh interval
STALE = "UPDATE repo_configs SET fetched_at = %s WHERE repo = %s"


def mark_stale(sql: Sql, cur: Cursor, event: Event) -> None:
    """For a push to the default branch, the repository's cached config is due for a read;
    the text stays, so jobs and intake go on reading it meanwhile."""
    if event.name != "push" or not event.repo:
        return
    default = event.payload.get("repository", {}).get("default_branch")
    if default and event.payload.get("ref") == HEADS + default:
        cur.execute(sql(STALE), (sql.ts(LONG_AGO), event.repo))
