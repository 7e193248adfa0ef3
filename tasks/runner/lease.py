"""Job ownership in the database: claim, heartbeat, finish, and requeue of abandoned jobs."""

from __future__ import annotations

import contextvars
import os
import socket
import threading
import uuid
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update

from app.core.kinds import command_of
from app.store.db import Database, rowcount
from app.store.models import TERMINAL_STATES, Job, JobState, Outbox, utcnow


def owner_id() -> str:
    """A lease owner: this host and process, and a nonce for this one attempt."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def claim(db: Database, job_id: int, owner: str, lease_seconds: int) -> bool:
    """Move a queued job to running under `owner`; False when someone else has it."""
    now = utcnow()
    with db.transaction() as s:
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
        return bool(rowcount(result))


def renew(db: Database, job_id: int, owner: str, lease_seconds: int) -> bool:
    """Extend the lease; False when the job was cancelled or taken over meanwhile."""
    with db.transaction() as s:
        result = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING)
            .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
        )
        return bool(rowcount(result))


def finish(db: Database, job_id: int, owner: str, state: str, result: dict[str, Any]) -> bool:
    """Record the outcome and free the idempotency key, if the job is still ours."""
    with db.transaction() as s:
        values: dict[str, Any] = {"state": state, "result": result, "finished_at": utcnow()}
        if state in TERMINAL_STATES:
            values |= {"live_key": None, "lease_owner": None, "lease_expires_at": None}
        done = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING)
            .values(**values)
        )
        return bool(rowcount(done))


MAX_ATTEMPTS = 3  # a job whose worker died this often is failed, not run again
GIVEN_UP = "given-up"  # lease_owner of such a job until its status comment and check run say so


def requeue_abandoned(db: Database) -> list[int]:
    """Running jobs whose worker stopped renewing go back to the queue from a clean state,
    unless their workers already died MAX_ATTEMPTS times on them (a job that kills its
    worker, say by running it out of memory): those fail with a message that says so, and
    wait (lease_owner GIVEN_UP) for `claim_given_up` to tell the person on GitHub."""
    now = utcnow()
    with db.transaction() as s:
        jobs = list(
            s.scalars(
                select(Job)
                .where(Job.state == JobState.RUNNING, Job.lease_expires_at < now)
                .with_for_update(skip_locked=True)
            )
        )
        requeued = []
        for job in jobs:
            values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
            if job.attempts >= MAX_ATTEMPTS:
                values |= {
                    "state": JobState.FAILED,
                    "live_key": None,
                    "finished_at": now,
                    "lease_owner": GIVEN_UP,
                    "steps": stopped_steps(job.steps or []),
                    "result": {"error": given_up_message(job), "worker_deaths": job.attempts},
                }
            else:
                values["state"] = JobState.QUEUED
            s.execute(
                update(Job).where(Job.id == job.id, Job.state == JobState.RUNNING).values(**values)
            )
            if job.attempts < MAX_ATTEMPTS:
                s.add(Outbox(job_id=job.id))
                requeued.append(job.id)
        return requeued


def given_up_message(job: Job) -> str:
    """Why a job whose worker kept dying failed, and what the person can do about it."""
    return (
        f"The worker running this job stopped {job.attempts} times before it could finish "
        "(out of memory or killed), so onloop gave up on it. Ask again with "
        f"{command_of(job.kind)} if you still want it; if it stops again, tell the people "
        f"who run onloop (job #{job.id}): it may need more memory than a worker has."
    )


def stopped_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last attempt's steps with the one its worker died in marked failed, not running."""
    return [
        {**step, "state": "failed", "error": "the worker stopped"}
        if step.get("state") == "running"
        else step
        for step in steps
    ]


def _unsettled(now: datetime) -> ColumnElement[bool]:
    """Given-up jobs nobody is telling about, or whose teller's claim ran out."""
    return and_(
        Job.state == JobState.FAILED,
        or_(
            Job.lease_owner == GIVEN_UP,
            and_(Job.lease_owner.like(f"{GIVEN_UP}:%"), Job.lease_expires_at < now),
        ),
    )


def claim_given_up(db: Database, owner: str, hold: timedelta, batch: int = 20) -> list[Job]:
    """Given-up jobs whose feedback `owner` settles now, held for `hold`: one process at a
    time edits a job's comment and check run, and a claim whose holder died (or whose GitHub
    calls failed) is taken again once `hold` has passed."""
    now = utcnow()
    claimed = []
    with db.transaction() as s:
        ids = list(s.scalars(select(Job.id).where(_unsettled(now)).order_by(Job.id).limit(batch)))
        for job_id in ids:
            done = s.execute(
                update(Job)
                .where(Job.id == job_id, _unsettled(now))
                .values(lease_owner=f"{GIVEN_UP}:{owner}"[:200], lease_expires_at=now + hold)
            )
            if rowcount(done):
                claimed.append(job_id)
    with db.read() as s:
        return list(s.scalars(select(Job).where(Job.id.in_(claimed)).order_by(Job.id)))


def release_given_up(db: Database, job_id: int, owner: str) -> bool:
    """`owner` has settled the job's feedback (or stopped trying): nobody claims it again."""
    with db.transaction() as s:
        done = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.lease_owner == f"{GIVEN_UP}:{owner}"[:200])
            .values(lease_owner=None, lease_expires_at=None)
        )
        return bool(rowcount(done))


class Heartbeat:
    """Renews a job's lease in a thread; sets `lost` when the job is no longer ours."""

    def __init__(self, db: Database, job_id: int, owner: str, lease_seconds: int) -> None:
        self.db, self.job_id, self.owner, self.lease = db, job_id, owner, lease_seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        # Started with the job's logging context (job_id, repo, kind), as its lines carry.
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._run,),
            name=f"lease-{job_id}",
            daemon=True,
        )

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


def republish_unclaimed(
    db: Database, older_than: timedelta, held: Collection[int] = ()
) -> list[int]:
    """Queued jobs whose last publish is older than `older_than` get published again, but for
    those in `held` (jobs the broker is known to hold a message for).

    Redis without persistence forgets its queue when it restarts; the database does not. A
    duplicate message is harmless: only one worker can claim a queued job.
    """
    cutoff = utcnow() - older_than
    with db.transaction() as s:
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
        ids = [job_id for job_id in ids if job_id not in held]
        for job_id in ids:
            s.add(Outbox(job_id=job_id))
        return ids


def expire_waiting(db: Database, max_age: timedelta) -> list[int]:
    """Jobs that waited longer than `max_age` for an authorisation run once more, only to
    say that they stopped waiting (the runner sees `authorization_expired`)."""
    cutoff = utcnow() - max_age
    with db.transaction() as s:
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
