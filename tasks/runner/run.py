"""The job entry point: claim by id, run the kind's runner under a lease, record the outcome."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis
import structlog
from opentelemetry import trace
from opentelemetry.trace import Link, Tracer
from opentelemetry.util.types import AttributeValue
from sqlalchemy import select, update
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.core.jobevents import JobEvent, JobEvents
from app.core.kinds import KINDS, Kinds
from app.core.logs import get_logger
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.core.tracing import context_of, span
from app.github import audit as github_audit
from app.github.clients import GitHubApp
from app.policy.org_config import OrgConfigLoader
from app.store import audit
from app.store.db import Database, rowcount
from app.store.models import Delivery, Job, JobState, Outbox, aware, utcnow
from tasks.runner.context import Cancelled, JobContext, JobFailed, JobListener, Runner
from tasks.runner.feedback_lane import FeedbackLane
from tasks.runner.lease import Heartbeat, claim, finish, owner_id
from tasks.runner.limits import Limiter, queue_position
from tasks.runner.outcomes import outcome_of, too_long
from tasks.runner.people import resume_if_authorized
from tasks.runner.quota import Once
from tasks.runner.steps import read_steps
from tasks.sandbox.teardown import Teardown
from tasks.sandbox.workplace import Workplace

log = get_logger("onloop.jobs")

Requeue = Callable[[float], None]
Listeners = Callable[[JobContext], list[JobListener]]
# A job the caps hold back: (its context, why, its place in the queue), said on GitHub once.
Queued = Callable[[JobContext, str, int | None], None]
# What a database that does not answer raises (a refused or dropped connection, a full pool,
# an SQLite file it cannot open or lock), as opposed to a statement's own error.
DATABASE_DOWN = (OperationalError, InterfaceError, PoolTimeout)


class JobUnread(Exception):
    """The database did not answer while the job was read or claimed, so nothing about the
    job changed: its message must not be acknowledged, and the job is asked for again once
    the database answers (tasks.queue.celery_app)."""


def why_down(exc: BaseException) -> str:
    """One short line for a database error: the driver's first line, not SQLAlchemy's SQL
    and link."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines() or [""]
    return f"{type(cause).__name__}: {lines[0]}"[:300]


@contextmanager
def reading(job_id: int) -> Iterator[None]:
    """Database errors in the block become JobUnread: the job has not started."""
    try:
        yield
    except DATABASE_DOWN as exc:
        raise JobUnread(f"job {job_id} unread: {why_down(exc)}") from exc


@dataclass
class JobRunner:
    """Runs jobs by id with what the worker built once: GitHub and the metrics writer, the
    kinds and their runners, the listeners that follow a job, the caps, the once-per-period
    keys, where sandboxes run and the organisation file's loader."""

    settings: Settings
    db: Database
    runners: Mapping[str, Runner]
    # All of these are the worker's, and required: a runner built without one of them
    # would silently tell nobody, cap nothing or have no sandboxes.
    github: GitHubApp = field(kw_only=True)
    meter: Telemetry = field(kw_only=True)
    listeners: Listeners = field(kw_only=True)
    queued: Queued = field(kw_only=True)
    limiter: Limiter | None = field(kw_only=True)
    once: Once | None = field(kw_only=True)
    workplace: Callable[[], Workplace] | None = field(kw_only=True)
    kinds: Kinds = field(default_factory=lambda: KINDS)
    org_config: OrgConfigLoader = field(default_factory=OrgConfigLoader)
    # The worker's tracer while traces are on (app.core.tracing); None: no span work.
    tracer: Tracer | None = field(default=None, kw_only=True)
    events: JobEvents = field(default_factory=lambda: JobEvents(None))

    def run(self, job_id: int, requeue: Requeue | None = None) -> str:
        """Run job `job_id` once; a job already taken or finished is left alone (idempotent).
        Sandboxed jobs first take a slot under the caps; when full, the job stays queued and
        `requeue(seconds)` asks again later. JobUnread when the database does not answer
        before the job is claimed and its run begins."""
        with reading(job_id), self.db.read() as s:
            row = s.get(Job, job_id)
            if row is None or row.state != JobState.QUEUED:
                log.info("job.not_claimed", job_id=job_id, state=row and row.state)
                return f"skipped ({row and row.state})"
            s.expunge(row)
        if self.tracer is None:
            return self._run_queued(row, requeue)
        with self._job_span(self.tracer, row) as current:
            outcome = self._run_queued(row, requeue)
            current.set_attribute("onloop.job.outcome", str(outcome))
            return outcome

    def _job_span(self, tracer: Tracer, row: Job) -> AbstractContextManager[trace.Span]:
        """The job's span: a child of the delivery's, whose traceparent intake stored on the
        row. Under Celery's span of the message (which the dispatcher sent in that same
        trace) it is that span's child; under another trace's, linked to it."""
        current = trace.get_current_span().get_span_context()
        delivery = context_of(row.traceparent)
        parent, links = None, []
        if delivery is not None:
            stored = trace.get_current_span(delivery).get_span_context()
            if not current.is_valid or current.trace_id != stored.trace_id:
                parent, links = delivery, [Link(current)] if current.is_valid else []
        attributes: dict[str, AttributeValue] = {
            "onloop.job.id": row.id,
            "onloop.job.kind": row.kind,
            "onloop.repo": row.repo,
            "onloop.job.attempt": row.attempts,
        }
        return span(tracer, "job", attributes, context=parent, links=links)

    def _run_queued(self, row: Job, requeue: Requeue | None) -> str:
        """Run the queued job `row`: under the caps when its kind is sandboxed."""
        job_id = row.id
        spec = self.kinds.get(row.kind)
        caps = self.limiter if spec is not None and spec.sandboxed else None
        if caps is None:
            return self._run_claimed(job_id)
        with caps.slot(job_id, row.repo, row.installation_id) as admission:
            if admission.admitted:
                adopt = partial(caps.adopt, admission.member, row.repo, row.installation_id)
                return self._run_claimed(job_id, adopt)
            with reading(job_id):
                return self._hold(row, admission.reason, admission.retry_after, requeue)

    def _hold(self, row: Job, reason: str, retry_after: float, requeue: Requeue | None) -> str:
        """The caps are full: the job stays queued, told once per change of reason or place."""
        place = queue_position(self.db, row)
        waiting = {"waiting": reason, "position": place}
        with self.db.transaction() as s:
            still = rowcount(
                s.execute(
                    update(Job)
                    .where(Job.id == row.id, Job.state == JobState.QUEUED)
                    .values(result=waiting)
                )
            )
            if still and requeue is not None:  # a message is out again: no resend needed
                s.add(Outbox(job_id=row.id, published_at=utcnow()))
        if not still:  # a duplicate message of a job another attempt took meanwhile
            log.info("job.not_claimed", job_id=row.id, state="no longer queued")
            return "skipped (no longer queued)"
        if row.result != waiting:
            audit.record(self.db, audit.LIMIT_WAIT, repo=row.repo, job_id=row.id, detail=waiting)
            self.queued(self.context(row), reason, place)
        if requeue is not None:
            requeue(retry_after)
        return f"waiting ({reason}, position {place})"

    def _run_claimed(self, job_id: int, adopt: Callable[[], int] | None = None) -> str:
        """Claim the job and run it. `adopt`, called once the claim holds, drops the job's
        other slots in Redis: the claim proves no other attempt runs it, so they belong to a
        dead worker (whose slot would otherwise outlive its lease) or to a duplicate about to
        give up."""
        settings, db = self.settings, self.db
        owner = owner_id()
        with reading(job_id):
            if not claim(db, job_id, owner, settings.job_lease_seconds):
                with db.read() as s:
                    state = s.scalar(select(Job.state).where(Job.id == job_id))
                log.info("job.not_claimed", job_id=job_id, state=state)
                return f"skipped ({state})"
        if adopt is not None:
            try:
                if dropped := adopt():
                    log.info("job.stale_slots_dropped", job_id=job_id, slots=dropped)
            except redis.RedisError:  # they expire on their own; the job need not wait
                log.warning("job.stale_slots_kept", job_id=job_id, exc_info=True)
        # Claimed: should the database fail here, the task waits for it as above, then finds
        # the job running and leaves it; its lease runs out and requeue_abandoned queues it.
        with reading(job_id), db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None
            s.expunge(job)
            guid = s.scalar(select(Delivery.guid).where(Delivery.id == job.delivery_row_id))
        # Every line of the run carries these, from any logger and from the threads it starts
        # (with a copy of this context); they are unbound when it ends.
        with structlog.contextvars.bound_contextvars(job_id=job_id, repo=job.repo, kind=job.kind):
            try:
                return self._run_owned(job, guid, owner)
            finally:  # its page shows the outcome (or that it changed hands) now
                self.events.publish(job_id, JobEvent.STATE)

    def _run_owned(self, job: Job, guid: str | None, owner: str) -> str:
        """Run the claimed job under its lease and record the outcome."""
        settings, db, job_id = self.settings, self.db, job.id
        audit.record(
            db,
            audit.DELIVERY,
            repo=job.repo,
            job_id=job_id,
            delivery_guid=guid,
            actor=job.requested_by,
            detail={"kind": job.kind, "number": job.number, "attempt": job.attempts},
        )
        with (
            Heartbeat(db, job_id, owner, settings.job_lease_seconds) as beat,
            github_audit.audit_writes(db, repo=job.repo, job_id=job_id),
        ):
            ctx = JobContext(
                settings,
                db,
                job,
                self.github,
                self.meter,
                cancel=beat.lost,
                workplaces=self.workplace,
                org_config=self.org_config,
                kinds=self.kinds,
                once=self.once,
                owner=owner,
                tracer=self.tracer,
                events=self.events,
            )
            ctx.head_sha = job.head_sha
            ctx.feedback = FeedbackLane()  # GitHub's progress writes overlap the work
            # Without an App nothing can reach GitHub: no status comment or check run to try.
            ctx.listeners = self.listeners(ctx) if self.github.configured else []
            ctx.teardown = Teardown()  # sandbox removals wait for the push (one step)
            state, result = self._run_in_time(ctx)
            ctx.sandboxes_removed()
            ctx.settle_feedback()  # the status comment's link is in ctx.recorded by now
            if state == JobState.CANCELLED:
                if self._state_of(job_id) != JobState.CANCELLED:  # not cancelled: taken
                    log.info("job.lost", detail="the job changed hands before it finished")
                    return "lost"  # its new holder (a worker, the watchdog) tells GitHub
                ctx.tell("finished", JobState.CANCELLED, {})
                return "cancelled"
            if ctx.notes:
                result = {**result, "notes": list(ctx.notes)}
            if ctx.recorded:
                result = {**result, **ctx.recorded}
            if not finish(db, job_id, owner, state, result):
                if (
                    self._state_of(job_id) == JobState.CANCELLED
                ):  # cancelled under it: its status says so
                    ctx.tell("finished", JobState.CANCELLED, {})
                    return "cancelled"
                log.info("job.lost", detail="the job changed hands before it finished")
                return "lost"
            ctx.tell("finished", state, result)
        if state == JobState.WAITING_FOR_AUTHORIZATION and resume_if_authorized(db, job_id):
            log.info("job.requeued", detail="the person authorised meanwhile")
        self._measure(job, state)
        if state == JobState.FAILED:
            error = str(result.get("error", ""))
            audit.record(
                db, audit.JOB_FAILED, repo=job.repo, job_id=job_id, detail={"error": error}
            )
            log.warning("job.finished", state=state, error=error)
        else:
            log.info("job.finished", state=state)
        return state

    def _state_of(self, job_id: int) -> str | None:
        """The job's state now; None when the database does not answer (the watchdog or a
        requeue settles the job later)."""
        try:
            with self.db.read() as s:
                return s.scalar(select(Job.state).where(Job.id == job_id))
        except DATABASE_DOWN:
            return None

    def context(self, job: Job) -> JobContext:
        """A context for `job` outside its run (to tell about it or settle it on GitHub)."""
        return JobContext(
            self.settings,
            self.db,
            job,
            self.github,
            self.meter,
            steps=read_steps(job.steps),
            org_config=self.org_config,
            kinds=self.kinds,
            once=self.once,
            events=self.events,
        )

    def _measure(self, job: Job, state: str) -> None:
        self.meter.inc("jobs_finished", kind=job.kind, state=state)
        started = aware(job.started_at)
        if started is not None:
            duration = (utcnow() - started).total_seconds()
            self.meter.observe("job_duration_seconds", duration, kind=job.kind)

    def _run_in_time(self, ctx: JobContext) -> tuple[JobState, dict[str, Any]]:
        """Run the kind's runner under the job's own time limit: Celery's time limits do
        nothing in the threads pool the worker runs, so the cancel watch stops the sandbox
        and the steps stop at their next check."""
        limit = self.settings.job_time_limit
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            ctx.cancel.set()

        deadline = threading.Timer(limit, contextvars.copy_context().run, args=(expire,))
        deadline.daemon = True
        deadline.start()
        try:
            runner = self.runners.get(ctx.job.kind)
            if runner is None:
                raise JobFailed(f"onloop has no runner for `{ctx.job.kind}` jobs")
            return JobState.SUCCEEDED, runner(ctx)
        except Cancelled:
            if not expired.is_set():
                log.info("job.cancelled")
                return JobState.CANCELLED, {}
            return JobState.FAILED, {"error": too_long(limit)}
        except Exception as exc:
            state, result = outcome_of(exc, ctx.job)
            if result.pop("crashed", False):
                log.exception("job.crashed")
            if expired.is_set() and state == JobState.FAILED:  # time ran out first
                result = {**result, "error": too_long(limit)}
            return state, result
        finally:
            deadline.cancel()
