"""Schedule slots: claimed by one insert-or-nothing row each, so a slot fires once however
many beat processes reach it; the row says what became of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import delete, exists, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from app.store.db import Database, rowcount
from app.store.fleet_tables import ScheduleSlot
from app.store.models import utcnow

KEEP = timedelta(days=90)  # older rows go, except each schedule's latest


class ScheduleOutcome(StrEnum):
    """What became of a slot."""

    CLAIMED = "claimed"  # a tick took it and is deciding (a tick that died leaves this)
    ARMED = "armed"  # the schedule's first slot seen: it fires from its next slot on
    QUEUED = "queued"  # jobs made (or joined): `job_ids`
    NOTHING = "nothing_to_do"  # a green default branch, no stale pull request
    SKIPPED = "skipped"  # the owner cannot act: `detail` says why
    FAILED = "failed"  # GitHub did not answer: `detail`; the next slot tries again


@dataclass(frozen=True)
class Claim:
    """A slot this tick claimed; `previous` is what the schedule's last slot came to."""

    id: int
    previous: ScheduleSlot | None


def claim(db: Database, repo: str, schedule: str, slot: datetime) -> Claim | None:
    """Claim (repo, schedule, slot), or None when another tick has it. A schedule seen for
    the first time is armed at once: a new or renamed schedule fires at its next slot, not
    at the one just past."""
    insert = sqlite.insert if db.sql.sqlite else postgresql.insert
    values = {"repo": repo, "schedule": schedule, "slot": slot, "job_ids": []}
    statement = insert(ScheduleSlot).values(
        **values, outcome=ScheduleOutcome.CLAIMED, created_at=utcnow()
    )
    first = statement.on_conflict_do_nothing(index_elements=["repo", "schedule", "slot"]).returning(
        ScheduleSlot.id
    )
    with db.write_lock(), db.transaction() as s:
        row_id = s.scalar(first)  # None: the row was there (RETURNING answers no row)
        if row_id is None:
            return None
        previous = s.scalar(
            select(ScheduleSlot)
            .where(
                ScheduleSlot.repo == repo,
                ScheduleSlot.schedule == schedule,
                ScheduleSlot.slot < slot,
            )
            .order_by(ScheduleSlot.slot.desc())
            .limit(1)
        )
        if previous is None:
            _set(s, row_id, ScheduleOutcome.ARMED, None, [])
        else:
            s.expunge(previous)
    return Claim(row_id, previous)


def settle(
    db: Database,
    row_id: int,
    outcome: ScheduleOutcome,
    detail: str | None = None,
    job_ids: list[int] | None = None,
    session: Session | None = None,
) -> None:
    """Say what became of the claimed slot (in `session`, when the jobs are made in it)."""
    if session is not None:
        _set(session, row_id, outcome, detail, job_ids or [])
        return
    with db.transaction() as s:
        _set(s, row_id, outcome, detail, job_ids or [])


def _set(
    s: Session, row_id: int, outcome: ScheduleOutcome, detail: str | None, job_ids: list[int]
) -> None:
    s.execute(
        update(ScheduleSlot)
        .where(ScheduleSlot.id == row_id)
        .values(outcome=outcome, detail=detail, job_ids=job_ids)
    )


def purge(db: Database, now: datetime) -> int:
    """Delete rows older than KEEP, keeping each schedule's latest (what it said last)."""
    newer = aliased(ScheduleSlot)
    has_newer = exists().where(
        newer.repo == ScheduleSlot.repo,
        newer.schedule == ScheduleSlot.schedule,
        newer.slot > ScheduleSlot.slot,
    )
    with db.transaction() as s:
        result = s.execute(
            delete(ScheduleSlot).where(ScheduleSlot.created_at < now - KEEP, has_newer)
        )
        return rowcount(result)


def slots(db: Database, repo: str, schedule: str | None = None) -> list[ScheduleSlot]:
    """A repository's slot rows (of one schedule), oldest first: for `onloop` and tests."""
    query = select(ScheduleSlot).where(ScheduleSlot.repo == repo)
    if schedule is not None:
        query = query.where(ScheduleSlot.schedule == schedule)
    with db.read() as s:
        found = list(s.scalars(query.order_by(ScheduleSlot.slot, ScheduleSlot.id)))
        s.expunge_all()
        return found
