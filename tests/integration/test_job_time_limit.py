"""A job past ONLOOP_JOB_TIME_LIMIT is stopped and fails saying so: Celery's own time limits do
nothing in the threads pool the worker runs, so the job keeps its deadline itself."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState
from tests.doubles.jobs import long_step, quiet_runner

REPO = "octo/slow"


def _queued(db: Database) -> int:
    with db.transaction() as s:
        job = Job(kind="rebase_pr", repo=REPO, installation_id=7, requested_by="a")
        s.add(job)
        s.flush()
        return job.id


@pytest.mark.timeout(120)
def test_a_job_past_its_time_limit_is_stopped_and_fails_saying_so(
    settings: Settings, db: Database
) -> None:
    short = settings.model_copy(update={"job_time_limit": 1})  # below the setting's minimum
    stopped = threading.Event()
    job_id = _queued(db)
    jobs = quiet_runner(short, db, {"rebase_pr": long_step(stopped)})
    assert jobs.run(job_id) == JobState.FAILED
    assert stopped.is_set()
    with db.read() as s:
        job = s.scalar(select(Job).where(Job.id == job_id))
        assert job is not None and job.state == JobState.FAILED
        assert "ran past onloop's time limit (1 s)" in job.result["error"]


def test_a_job_within_its_time_limit_is_not_touched(settings: Settings, db: Database) -> None:
    job_id = _queued(db)
    runner = quiet_runner(settings, db, {"rebase_pr": lambda ctx: {"ok": True}})
    assert runner.run(job_id) == JobState.SUCCEEDED
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.result == {"ok": True}
