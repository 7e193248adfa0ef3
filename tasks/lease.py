"""Job ownership in the database: claim, heartbeat, finish, and requeue of abandoned jobs."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update

from app.db import Database
from app.models import Job, JobState, Outbox, utcnow


def claim(db: Database, job_id: int, owner: str, lease_seconds: int) -> bool:
    """Move a queued job to running under `owner`; False when someone else has it."""
    now = utcnow()
    with db.session() as s:
        result = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.state == JobState.QUEUED)
            .values(
                state=JobState.RUNNING,
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                attempts=Job.attempts + 1,
                started_at=now,
                steps=[],
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]


def renew(db: Database, job_id: int, owner: str, lease_seconds: int) -> bool:
    """Extend the lease; False when the job was cancelled or taken over meanwhile."""
    with db.session() as s:
        result = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING)
            .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]


def finish(db: Database, job_id: int, owner: str, state: str, result: dict[str, Any]) -> bool:
    """Record the outcome and free the idempotency key, if the job is still ours."""
    with db.session() as s:
        values: dict[str, Any] = {"state": state, "result": result, "finished_at": utcnow()}
        if state in JobState.TERMINAL:
            values |= {"live_key": None, "lease_owner": None, "lease_expires_at": None}
        done = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING)
            .values(**values)
        )
        return bool(done.rowcount)  # type: ignore[attr-defined]


MAX_ATTEMPTS = 3  # a job whose worker died this often is failed, not run again


def requeue_abandoned(db: Database) -> list[int]:
    """Running jobs whose worker stopped renewing go back to the queue from a clean state,
    unless their workers already died MAX_ATTEMPTS times on them (a job that kills its
    worker, say by running it out of memory): those fail with a message that says so."""
    now = utcnow()
    with db.session() as s:
        rows = list(
            s.execute(
                select(Job.id, Job.attempts)
                .where(Job.state == JobState.RUNNING, Job.lease_expires_at < now)
                .with_for_update(skip_locked=True)
            )
        )
        requeued = []
        for job_id, attempts in rows:
            values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
            if attempts >= MAX_ATTEMPTS:
                values |= {
                    "state": JobState.FAILED,
                    "live_key": None,
                    "finished_at": now,
                    "result": {
                        "error": f"the worker running this job stopped {attempts} times "
                        "(out of memory or time?); onloop gave up. Ask again, or tell the "
                        "people who run onloop"
                    },
                }
            else:
                values["state"] = JobState.QUEUED
            s.execute(
                update(Job).where(Job.id == job_id, Job.state == JobState.RUNNING).values(**values)
            )
            if attempts < MAX_ATTEMPTS:
                s.add(Outbox(job_id=job_id))
                requeued.append(job_id)
        return requeued


class Heartbeat:
    """Renews a job's lease in a thread; sets `lost` when the job is no longer ours."""

    def __init__(self, db: Database, job_id: int, owner: str, lease_seconds: int) -> None:
        self.db, self.job_id, self.owner, self.lease = db, job_id, owner, lease_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id}", daemon=True)

    def _run(self) -> None:
        interval = max(0.5, self.lease / 3)
        while not self._stop.wait(interval):
            try:
                if not renew(self.db, self.job_id, self.owner, self.lease):
                    self.lost.set()
                    return
            except Exception:  # noqa: S112 - a database blip: try again next beat
                continue

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def republish_unclaimed(db: Database, older_than: timedelta) -> list[int]:
    """Queued jobs whose last publish is older than `older_than` get published again.

    Redis without persistence forgets its queue when it restarts; the database does not. A
    duplicate message is harmless: only one worker can claim a queued job.
    """
    cutoff = utcnow() - older_than
    with db.session() as s:
        last = (
            select(Outbox.job_id, func.max(Outbox.published_at).label("at"))
            .group_by(Outbox.job_id)
            .subquery()
        )
        unpublished = select(Outbox.job_id).where(Outbox.published_at.is_(None))
        ids = list(
            s.scalars(
                select(Job.id)
                .join(last, last.c.job_id == Job.id)
                .where(Job.state == JobState.QUEUED, last.c.at < cutoff)
                .where(Job.id.not_in(unpublished))
            )
        )
        for job_id in ids:
            s.add(Outbox(job_id=job_id))
        return ids


def expire_waiting(db: Database, max_age: timedelta) -> list[int]:
    """Jobs that waited longer than `max_age` for an authorisation run once more, only to
    say that they stopped waiting (the runner sees `authorization_expired`)."""
    cutoff = utcnow() - max_age
    with db.session() as s:
        jobs = list(
            s.scalars(
                select(Job)
                .where(Job.state == JobState.WAITING_FOR_AUTHORIZATION, Job.finished_at < cutoff)
                .with_for_update(skip_locked=True)
            )
        )
        for job in jobs:
            job.params = {**(job.params or {}), "authorization_expired": True}
            job.state = JobState.QUEUED
            s.add(Outbox(job_id=job.id))
        return [job.id for job in jobs]
