"""The watchdog's rules: a job not final past its time limit and grace gets a final outcome."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update

from app.core.kinds import command_of
from app.store.db import Database, rowcount
from app.store.models import Job, JobState, aware, utcnow
from tasks.runner.lease import GIVEN_UP, stopped_steps
from tasks.runner.outcomes import Overdue


@dataclass(frozen=True)
class Bound:
    """How long a job may take: its time limit (ONLOOP_JOB_TIME_LIMIT) plus the watchdog's
    grace (ONLOOP_WATCHDOG_GRACE), counted from its last start, or from its creation when it
    never started."""

    limit: timedelta
    grace: timedelta

    @property
    def total(self) -> timedelta:
        return self.limit + self.grace


def overdue_message(job: Job, outcome: Overdue, bound: Bound) -> str:
    """What happened to the job, and what the person can do about it."""
    again = f"Ask again with {command_of(job.kind)} if you still want it"
    seconds = round(bound.total.total_seconds())
    span = f"{seconds} s" if seconds < 120 else f"{round(seconds / 60)} min"
    if outcome == Overdue.NEVER_STARTED:
        return (
            f"This job waited more than {span} and no onloop worker started it (the "
            "workers are stopped, busy or cannot reach their queue), so onloop gave up on it; "
            f"nothing was changed. {again}; if it happens again, tell the people who run "
            f"onloop (job #{job.id})."
        )
    return (
        f"This job was still not finished {span} after it started (its worker stopped, "
        "or lost its queue, database or sandboxes), so onloop gave up on it and will push, "
        f"comment and review nothing more for it. {again}; if it happens again, tell the "
        f"people who run onloop (job #{job.id})."
    )


def _started(job: Job) -> datetime:
    """When the job's current wait began: its last start, else its creation."""
    return aware(job.started_at) or aware(job.created_at) or utcnow()


def outcome_for(job: Job, bound: Bound, now: datetime) -> Overdue | None:
    """The watchdog's outcome for `job` now, or None while it is within its bound (or is not
    the watchdog's: final already, or waiting for an authorisation, which has its own expiry
    in tasks.runner.lease.expire_waiting)."""
    if job.state not in (JobState.RUNNING, JobState.QUEUED):
        return None
    if _started(job) + bound.total > now:
        return None
    if job.state == JobState.QUEUED and not job.attempts:
        return Overdue.NEVER_STARTED
    return Overdue.ABANDONED


def mark_overdue(db: Database, bound: Bound, batch: int = 100) -> dict[int, Overdue]:
    """Jobs past their bound become `failed` with the watchdog's outcome, each under a
    compare-and-set on the state and lease it was read with (a job that finishes, is
    cancelled or is claimed meanwhile is left alone). They wait, as given-up jobs do (lease
    owner GIVEN_UP), for their status comment and check run to be settled on GitHub
    (tasks.queue.dispatch.settle_given_up). A live worker still running one sees its lease
    lost and stops; `JobContext.before_write` keeps it from writing to GitHub."""
    now = utcnow()
    cutoff = now - bound.total
    started = func.coalesce(Job.started_at, Job.created_at)
    with db.read() as s:
        jobs = list(
            s.scalars(
                select(Job)
                .where(
                    or_(Job.state == JobState.RUNNING, Job.state == JobState.QUEUED),
                    started < cutoff,
                )
                .order_by(Job.id)
                .limit(batch)
            )
        )
        s.expunge_all()
    marked: dict[int, Overdue] = {}
    for job in jobs:
        outcome = outcome_for(job, bound, now)
        if outcome is None:
            continue
        result: dict[str, Any] = {
            "error": overdue_message(job, outcome, bound),
            "outcome": str(outcome),
            "was": job.state,
        }
        same_lease = (
            Job.lease_owner.is_(None)
            if job.lease_owner is None
            else Job.lease_owner == job.lease_owner
        )
        with db.transaction() as s:
            done = s.execute(
                update(Job)
                .where(Job.id == job.id, Job.state == job.state, same_lease)
                .where(Job.attempts == job.attempts)
                .values(
                    state=JobState.FAILED,
                    live_key=None,
                    finished_at=now,
                    lease_owner=GIVEN_UP,
                    lease_expires_at=None,
                    steps=stopped_steps(job.steps or []),
                    result=result,
                )
            )
            if rowcount(done):
                marked[job.id] = outcome
    return marked
