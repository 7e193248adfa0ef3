"""Cancelling a live job: one compare-and-set, shared by `/agent cancel` and the job page."""

from __future__ import annotations

from sqlalchemy import update

from app.store.db import Database, rowcount
from app.store.models import LIVE_STATES, Job, JobState, utcnow


def cancel_live(db: Database, job_id: int, reason: str) -> bool:
    """Mark job `job_id` cancelled if it is still live; whether this call did. A running job
    sees it within a second or so (its cancel watch stops its sandbox)."""
    with db.transaction() as s:
        done = s.execute(
            update(Job)
            .where(Job.id == job_id, Job.state.in_(LIVE_STATES))
            .values(
                state=JobState.CANCELLED,
                live_key=None,
                finished_at=utcnow(),
                result={"reason": reason},
            )
        )
    return bool(rowcount(done))
