"""Job ownership on the real database: one claimant, abandoned jobs requeued, stale owners
unable to overwrite the outcome."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update

from app.store.db import Database
from app.store.models import Job, JobState, Outbox, utcnow
from tasks.runner.lease import claim, finish, renew, requeue_abandoned


def new_job(db: Database) -> int:
    with db.transaction() as s:
        job = Job(kind="help", repo="o/r", number=1, requested_by="alice", live_key="k1")
        s.add(job)
        s.flush()
        return job.id


def test_only_one_worker_claims_a_job(db: Database) -> None:
    job_id = new_job(db)
    assert claim(db, job_id, "w1", 60)
    assert not claim(db, job_id, "w2", 60)
    assert renew(db, job_id, "w1", 60) and not renew(db, job_id, "w2", 60)
    assert not finish(db, job_id, "w2", JobState.SUCCEEDED, {})
    assert finish(db, job_id, "w1", JobState.SUCCEEDED, {"ok": True})
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None
        assert (job.state, job.live_key, job.attempts) == (JobState.SUCCEEDED, None, 1)
    assert not claim(db, job_id, "w3", 60)  # a duplicate message for a finished job


def test_abandoned_job_is_requeued_and_the_old_owner_is_locked_out(db: Database) -> None:
    job_id = new_job(db)
    assert claim(db, job_id, "dead-worker", 60)
    assert requeue_abandoned(db) == []  # lease still valid
    with db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    assert requeue_abandoned(db) == [job_id]
    with db.read() as s:
        assert s.scalar(select(Job.state).where(Job.id == job_id)) == JobState.QUEUED
        assert (
            s.scalar(select(func.count()).select_from(Outbox).where(Outbox.job_id == job_id)) == 1
        )
    assert claim(db, job_id, "new-worker", 60)
    assert not renew(db, job_id, "dead-worker", 60)
    assert not finish(db, job_id, "dead-worker", JobState.FAILED, {})
    assert finish(db, job_id, "new-worker", JobState.SUCCEEDED, {})
    with db.read() as s:
        assert s.scalar(select(Job.attempts).where(Job.id == job_id)) == 2


def test_cancelled_job_cannot_be_renewed_or_finished(db: Database) -> None:
    job_id = new_job(db)
    assert claim(db, job_id, "w1", 60)
    with db.transaction() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(state=JobState.CANCELLED, live_key=None)
        )
    assert not renew(db, job_id, "w1", 60)
    assert not finish(db, job_id, "w1", JobState.SUCCEEDED, {})
    with db.read() as s:
        assert s.scalar(select(Job.state).where(Job.id == job_id)) == JobState.CANCELLED


def test_a_job_whose_worker_keeps_dying_fails_after_three_attempts(db: Database) -> None:
    job_id = new_job(db)
    for attempt in range(1, 4):
        assert claim(db, job_id, f"worker-{attempt}", 60)
        with db.transaction() as s:
            s.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )
        assert requeue_abandoned(db) == ([job_id] if attempt < 3 else [])
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None
        assert (job.state, job.live_key, job.attempts) == (JobState.FAILED, None, 3)
        assert "stopped 3 times" in job.result["error"]
