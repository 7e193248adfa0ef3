"""The job entry point: claim by id, run the kind's runner under a lease, record the outcome."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable
from functools import partial

import redis
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from github.GithubException import RateLimitExceededExceedsMaxWait
from sqlalchemy import select, update

from app import audit
from app.commands import Kind
from app.db import Database
from app.github import InstallationUnavailable
from app.logs import get_logger
from app.models import Delivery, Job, JobState, Outbox, aware, utcnow
from app.settings import Settings
from app.telemetry import telemetry
from tasks import feedback
from tasks.celery_app import QUEUE, RUN_JOB
from tasks.context import (
    Cancelled,
    JobContext,
    JobFailed,
    JobListener,
    Runner,
    WaitForAuthorization,
)
from tasks.lease import Heartbeat, claim, finish
from tasks.limits import Limiter, queue_position
from tasks.people import resume_if_authorized

log = get_logger("onloop.jobs")


_databases: dict[str, Database] = {}
_limiters: dict[str, Limiter] = {}
_db_lock = threading.Lock()


def database(settings: Settings) -> Database:
    """One engine per database URL per worker process."""
    with _db_lock:
        if settings.database_url not in _databases:
            _databases[settings.database_url] = Database(settings.database_url)
        return _databases[settings.database_url]


def runners() -> dict[str, Runner]:
    from tasks import replies
    from tasks.blueprints.fix_ci import run_fix_ci
    from tasks.blueprints.fix_issue import run_fix_issue
    from tasks.blueprints.rebase import run_rebase
    from tasks.blueprints.review import run_review

    return {
        **replies.RUNNERS,
        "rebase_pr": run_rebase,
        "fix_ci": run_fix_ci,
        "fix_issue": run_fix_issue,
        "review_pr": run_review,
    }


def listeners(ctx: JobContext) -> list[JobListener]:
    """What follows a job's progress: its status comment and check run (tasks.feedback)."""
    return feedback.listeners_for(ctx)


def limiter(settings: Settings) -> Limiter | None:
    """The Redis caps on running jobs and the start bucket (None without Redis)."""
    if not settings.redis_url:
        return None
    with _db_lock:
        if settings.redis_url not in _limiters:
            client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
            _limiters[settings.redis_url] = Limiter.from_settings(settings, client)
        return _limiters[settings.redis_url]


def run_job(settings: Settings, job_id: int, requeue: Callable[[float], None] | None = None) -> str:
    """Run job `job_id` once; a job already taken or finished is left alone (idempotent).
    Sandboxed jobs first take a slot under the caps; when full, the job stays queued and
    `requeue(seconds)` asks again later."""
    db = database(settings)
    with db.sessions() as s:
        row = s.get(Job, job_id)
        if row is None or row.state != JobState.QUEUED:
            log.info("job not claimed", job_id=job_id, state=row and row.state)
            return f"skipped ({row and row.state})"
        s.expunge(row)
    caps = limiter(settings) if row.kind in Kind.SANDBOXED else None
    if caps is None:
        return _run_claimed(settings, db, job_id)
    with caps.slot(job_id, row.repo, row.installation_id) as admission:
        if admission.admitted:
            adopt = partial(caps.adopt, admission.member, row.repo, row.installation_id)
            return _run_claimed(settings, db, job_id, adopt)
        place = queue_position(db, row)
        waiting = {"waiting": admission.reason, "position": place}
        with db.session() as s:
            still = s.execute(
                update(Job)
                .where(Job.id == job_id, Job.state == JobState.QUEUED)
                .values(result=waiting)
            ).rowcount  # type: ignore[attr-defined]
            if still and requeue is not None:  # a message is out again: no resend needed
                s.add(Outbox(job_id=job_id, published_at=utcnow()))
        if not still:  # a duplicate message of a job another attempt took meanwhile
            log.info("job not claimed", job_id=job_id, state="no longer queued")
            return "skipped (no longer queued)"
        if row.result != waiting:  # said once per change of reason or place
            audit.record(db, audit.LIMIT_WAIT, repo=row.repo, job_id=job_id, detail=waiting)
            feedback.queued(settings, db, row, admission.reason, place)
        if requeue is not None:
            requeue(admission.retry_after)
        return f"waiting ({admission.reason}, position {place})"


def _run_claimed(
    settings: Settings, db: Database, job_id: int, adopt: Callable[[], int] | None = None
) -> str:
    """Claim the job and run it. `adopt`, called once the claim holds, drops the job's other
    slots in Redis: the claim proves no other attempt runs it, so they belong to a dead worker
    (whose slot would otherwise outlive its lease) or to a duplicate about to give up."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    if not claim(db, job_id, owner, settings.job_lease_seconds):
        with db.sessions() as s:
            state = s.scalar(select(Job.state).where(Job.id == job_id))
        log.info("job not claimed", job_id=job_id, state=state)
        return f"skipped ({state})"
    if adopt is not None:
        try:
            if dropped := adopt():
                log.info("dropped stale job slots", job_id=job_id, slots=dropped)
        except redis.RedisError:  # they expire on their own; the job need not wait for Redis
            log.warning("could not drop stale job slots", job_id=job_id, exc_info=True)
    with db.sessions() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        guid = s.scalar(select(Delivery.guid).where(Delivery.id == job.delivery_id))
    audit.record(
        db,
        audit.DELIVERY,
        repo=job.repo,
        job_id=job_id,
        delivery_guid=guid,
        actor=job.requested_by,
        detail={"kind": job.kind, "number": job.number, "attempt": job.attempts},
    )
    bound = log.bind(job_id=job_id, repo=job.repo, kind=job.kind)
    runner = runners().get(job.kind)
    with (
        Heartbeat(db, job_id, owner, settings.job_lease_seconds) as beat,
        audit.audit_writes(db, repo=job.repo, job_id=job_id),
    ):
        ctx = JobContext(settings=settings, db=db, job=job, cancel=beat.lost)
        ctx.head_sha = job.head_sha
        ctx.listeners = listeners(ctx)
        expired = threading.Event()

        def expire() -> None:
            # Celery's time limits do nothing in the threads pool the worker runs, so the job
            # keeps its own: the cancel watch stops its sandbox, steps stop at their next check.
            expired.set()
            ctx.cancel.set()

        deadline = threading.Timer(settings.job_time_limit, expire)
        deadline.daemon = True
        deadline.start()
        too_long = (
            f"the job ran past onloop's time limit ({settings.job_time_limit} s) and was "
            "stopped; ask again, perhaps for a smaller change"
        )
        try:
            if runner is None:
                raise JobFailed(f"onloop has no runner for `{job.kind}` jobs")
            result = runner(ctx)
            state = JobState.SUCCEEDED
        except Cancelled:
            if not expired.is_set():
                deadline.cancel()
                bound.info("job cancelled")
                ctx.tell("finished", JobState.CANCELLED, {})
                return "cancelled"
            result, state = {"error": too_long}, JobState.FAILED
        except WaitForAuthorization as exc:
            result, state = {"waiting": str(exc)}, JobState.WAITING_FOR_AUTHORIZATION
        except JobFailed as exc:
            result, state = {"error": exc.message, **exc.result}, JobState.FAILED
        except InstallationUnavailable as exc:  # not an internal error: the operator's to fix
            account = job.repo.split("/", 1)[0]  # `owner` is this attempt's lease
            message = (
                f"onloop's installation on {account} is gone or suspended; "
                "reinstall or unsuspend the App"
            )
            if exc.status == 401:  # the App's own credentials were refused, not the install
                message = (
                    "GitHub refused onloop's App credentials; the operator should check "
                    "ONLOOP_APP_ID and the private key (`onloop doctor`)"
                )
            result, state = {"error": message, "github_status": exc.status}, JobState.FAILED
        except RateLimitExceededExceedsMaxWait:
            message = (
                "GitHub's rate limit for onloop is used up for longer than a job may wait; "
                "ask again once it resets (usually within the hour)"
            )
            result, state = {"error": message}, JobState.FAILED
        except SoftTimeLimitExceeded:  # a prefork pool, should one ever run the task
            result, state = {"error": too_long}, JobState.FAILED
        except Exception as exc:
            bound.exception("job crashed")
            result, state = {"error": f"internal error: {type(exc).__name__}"}, JobState.FAILED
        deadline.cancel()
        if expired.is_set() and state == JobState.FAILED:  # whatever broke, time ran out first
            result = {**result, "error": too_long}
        if ctx.notes:
            result = {**result, "notes": list(ctx.notes)}
        if not finish(db, job_id, owner, state, result):
            with db.sessions() as s:
                now = s.scalar(select(Job.state).where(Job.id == job_id))
            if now == JobState.CANCELLED:  # cancelled under it: its status says so
                ctx.tell("finished", JobState.CANCELLED, {})
                return "cancelled"
            bound.info("job changed hands before it finished")
            return "lost"
        ctx.tell("finished", state, result)
    if state == JobState.WAITING_FOR_AUTHORIZATION and resume_if_authorized(db, job_id):
        bound.info("the person authorised meanwhile: requeued")
    _measure(settings, job, state)
    bound.info("job finished", state=state)
    return state


def _measure(settings: Settings, job: Job, state: str) -> None:
    meter = telemetry(settings.redis_url)
    meter.inc("jobs_finished", kind=job.kind, state=state)
    started = aware(job.started_at)
    if started is not None:
        meter.observe("job_duration_seconds", (utcnow() - started).total_seconds(), kind=job.kind)


def register(celery: Celery, settings: Settings) -> None:
    """Register the job task on `celery`; the task takes the job id and nothing else."""

    @celery.task(name=RUN_JOB, ignore_result=True)
    def _run_job(job_id: int) -> str:
        def requeue(seconds: float) -> None:
            _run_job.apply_async(args=[int(job_id)], countdown=seconds, queue=QUEUE)

        return run_job(settings, int(job_id), requeue)
