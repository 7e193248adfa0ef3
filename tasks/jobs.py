"""The job entry point: claim by id, run the kind's runner under a lease, record the outcome."""

from __future__ import annotations

import os
import socket
import threading
import uuid

from celery import Celery
from sqlalchemy import select

from app.db import Database
from app.logs import get_logger
from app.models import Job, JobState
from app.settings import Settings
from tasks.celery_app import RUN_JOB
from tasks.context import (
    Cancelled,
    JobContext,
    JobFailed,
    JobListener,
    Runner,
    WaitForAuthorization,
)
from tasks.lease import Heartbeat, claim, finish

log = get_logger("onloop.jobs")

LEASE_SECONDS = int(os.environ.get("ONLOOP_JOB_LEASE_SECONDS", "60"))

_databases: dict[str, Database] = {}
_db_lock = threading.Lock()


def database(settings: Settings) -> Database:
    """One engine per database URL per worker process."""
    with _db_lock:
        if settings.database_url not in _databases:
            _databases[settings.database_url] = Database(settings.database_url)
        return _databases[settings.database_url]


def runners() -> dict[str, Runner]:
    from tasks import replies
    from tasks.blueprints.rebase import run_rebase

    return {**replies.RUNNERS, "rebase_pr": run_rebase}


def listeners(ctx: JobContext) -> list[JobListener]:
    """What follows a job's progress: its status comment and check run (tasks.feedback)."""
    from tasks import feedback

    return feedback.listeners_for(ctx)


def run_job(settings: Settings, job_id: int) -> str:
    """Run job `job_id` once; a job already taken or finished is left alone (idempotent)."""
    db = database(settings)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    if not claim(db, job_id, owner, LEASE_SECONDS):
        with db.sessions() as s:
            state = s.scalar(select(Job.state).where(Job.id == job_id))
        log.info("job not claimed", job_id=job_id, state=state)
        return f"skipped ({state})"
    with db.sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
    bound = log.bind(job_id=job_id, repo=job.repo, kind=job.kind)
    runner = runners().get(job.kind)
    with Heartbeat(db, job_id, owner, LEASE_SECONDS) as beat:
        ctx = JobContext(settings=settings, db=db, job=job, cancel=beat.lost)
        ctx.head_sha = job.head_sha
        ctx.listeners = listeners(ctx)
        try:
            if runner is None:
                raise JobFailed(f"onloop has no runner for `{job.kind}` jobs")
            result = runner(ctx)
            state = JobState.SUCCEEDED
        except Cancelled:
            bound.info("job cancelled")
            ctx.tell("finished", JobState.CANCELLED, {})
            return "cancelled"
        except WaitForAuthorization as exc:
            result, state = {"waiting": str(exc)}, JobState.WAITING_FOR_AUTHORIZATION
        except JobFailed as exc:
            result, state = {"error": exc.message, **exc.result}, JobState.FAILED
        except Exception as exc:
            bound.exception("job crashed")
            result, state = {"error": f"internal error: {type(exc).__name__}"}, JobState.FAILED
    if not finish(db, job_id, owner, state, result):
        bound.info("job changed hands before it finished")
        return "lost"
    ctx.tell("finished", state, result)
    bound.info("job finished", state=state)
    return state


def register(celery: Celery, settings: Settings) -> None:
    """Register the job task on `celery`; the task takes the job id and nothing else."""

    @celery.task(name=RUN_JOB, ignore_result=True)
    def _run_job(job_id: int) -> str:
        return run_job(settings, int(job_id))
