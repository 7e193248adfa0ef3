"""A job past ONLOOP_JOB_TIME_LIMIT is stopped and fails saying so: Celery's own time limits do
nothing in the threads pool the worker runs, so the job keeps its deadline itself."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from app.db import Database
from app.models import Job, JobState
from app.settings import Settings
from tasks.context import JobContext

REPO = "octo/slow"


def _queued(db: Database) -> int:
    with db.session() as s:
        job = Job(kind="rebase_pr", repo=REPO, installation_id=7, requested_by="a")
        s.add(job)
        s.flush()
        return job.id


@pytest.mark.timeout(120)
def test_a_job_past_its_time_limit_is_stopped_and_fails_saying_so(
    settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import jobs

    short = settings.model_copy(update={"job_time_limit": 1})  # below the setting's minimum
    stopped = threading.Event()

    def runner(ctx: JobContext) -> dict[str, object]:
        # A step that would run for ten minutes in its sandbox, under the job's cancel watch
        # (as every sandboxed step is): stopping the sandbox is what ends it.
        with ctx.cancel_watch(stopped.set, interval=0.1):
            stopped.wait(600)
        ctx.check_cancelled()
        return {}

    monkeypatch.setattr(jobs, "runners", lambda: {"rebase_pr": runner})
    monkeypatch.setattr(jobs, "listeners", lambda ctx: [])
    job_id = _queued(db)
    assert jobs.run_job(short, job_id) == JobState.FAILED
    assert stopped.is_set()
    with db.sessions() as s:
        job = s.scalar(select(Job).where(Job.id == job_id))
        assert job is not None and job.state == JobState.FAILED
        assert "ran past onloop's time limit (1 s)" in job.result["error"]


def test_a_job_within_its_time_limit_is_not_touched(
    settings: Settings, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import jobs

    monkeypatch.setattr(jobs, "runners", lambda: {"rebase_pr": lambda ctx: {"ok": True}})
    monkeypatch.setattr(jobs, "listeners", lambda ctx: [])
    job_id = _queued(db)
    assert jobs.run_job(settings, job_id) == JobState.SUCCEEDED
    with db.sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.result == {"ok": True}
