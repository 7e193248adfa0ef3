"""What a running job sees: its row, settings, database, GitHub, metrics, steps, a cancel flag."""

from __future__ import annotations

import contextvars
import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue
from sqlalchemy import select

from app.core.jobevents import JobEvent, JobEvents
from app.core.kinds import KINDS, Kinds
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.core.tracing import nanos, span
from app.github.clients import GitHubApp
from app.intake.commands import Command, CommandParams
from app.policy.org_config import OrgConfigLoader
from app.store import audit
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.runner.feedback_lane import FeedbackLane
from tasks.runner.quota import Once
from tasks.runner.steps import StepKind, StepRecord, StepState
from tasks.sandbox.teardown import Teardown
from tasks.sandbox.workplace import Workplace

log = logging.getLogger(__name__)
OUTPUT_TAIL = 4000
Runner = Callable[["JobContext"], dict[str, Any]]


class JobListener(Protocol):
    """Told of a job's progress (status comment, check run); its failures never fail the job."""

    def steps_changed(self, ctx: JobContext) -> None: ...

    def finished(self, ctx: JobContext, state: str, result: dict[str, Any]) -> None: ...


class Cancelled(Exception):
    """The job was cancelled (a command, a newer push, or its lease was lost)."""


class WaitForAuthorization(Exception):
    """The job needs the person's authorisation; it waits and resumes after the OAuth flow."""


class JobFailed(Exception):
    """The job cannot go on; `message` says why and what the person can do instead."""

    def __init__(self, message: str, **result: Any) -> None:
        super().__init__(message)
        self.message = message
        self.result = result


@dataclass
class JobContext:
    settings: Settings
    db: Database
    job: Job
    github: GitHubApp  # the worker's one way into GitHub (its write locks, its metrics)
    meter: Telemetry  # the worker's one metrics writer
    cancel: threading.Event = field(default_factory=threading.Event)
    steps: list[StepRecord] = field(default_factory=list)
    listeners: list[JobListener] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said with the outcome (e.g. egress refusals)
    # Kept on the job's result whatever its outcome (e.g. the hosts setup was refused).
    recorded: dict[str, Any] = field(default_factory=dict)
    head_sha: str | None = None  # the commit the job works on, once known (for check runs)
    plan: list[str] = field(default_factory=list)  # the step names it expects, for "k of n"
    # Where sandboxes run (the worker's one Workplace, made on first use); None outside a job.
    workplaces: Callable[[], Workplace] | None = None
    # The organisation file, parsed again only when it changes (the worker's one loader).
    org_config: OrgConfigLoader = field(default_factory=OrgConfigLoader)
    kinds: Kinds = field(default_factory=lambda: KINDS)  # the worker's table of job kinds
    # The worker's once-per-period keys in Redis (replies and notices to one person on a
    # thread); None only where no Redis is configured, and then every reply is sent.
    once: Once | None = None
    # The lease this run of the job holds (tasks.runner.lease); None outside a run.
    owner: str | None = None
    # The worker's tracer while traces are on (app.core.tracing): a span for each step.
    tracer: Tracer | None = None
    # The worker's publisher of job events (the job page's live updates); a no-op without Redis.
    events: JobEvents = field(default_factory=lambda: JobEvents(None))
    # A run's progress feedback, off the job's thread (tasks.runner.feedback_lane); None:
    # listeners are told inline (outside a run).
    feedback: FeedbackLane | None = None
    # Sandbox removals and pool refills, held a step while the job pushes; joined before it
    # ends (None: done inline).
    teardown: Teardown | None = None

    @property
    def workplace(self) -> Workplace:
        """The worker's sandbox backend, mirrors, snapshots and warm pool."""
        if self.workplaces is None:
            raise JobFailed("this job was started without a sandbox workplace")
        return self.workplaces()

    @property
    def command(self) -> Command:
        """The Command the job was made from, rebuilt from what intake stored."""
        return Command.from_params(self.job.params or {})

    @property
    def params(self) -> CommandParams:
        """The command's own parameters (verb, args, run ids...)."""
        return self.command.params

    @property
    def authorization_expired(self) -> bool:
        """Set on the stored command when the job waited too long for an authorisation
        (tasks.runner.lease.expire_waiting): it runs once more only to say so."""
        return bool((self.job.params or {}).get("authorization_expired"))

    @property
    def current_step(self) -> str | None:
        """The name of the step running now (the innermost), None between steps."""
        running = [step for step in self.steps if step.state == StepState.RUNNING]
        return running[-1].name if running else None

    def check_cancelled(self) -> None:
        """Raise Cancelled when the job is no longer wanted."""
        if self.cancel.is_set():
            raise Cancelled()
        with self.db.read() as s:
            state = s.scalar(select(Job.state).where(Job.id == self.job.id))
        if state != JobState.RUNNING:
            self.cancel.set()
            raise Cancelled()

    def before_write(self) -> None:
        """Call right before a GitHub write that changes code or speaks for the job (a push,
        a pull request, a review, a report comment): raise Cancelled unless the job is still
        running under this run's own lease. Cancelled means final, whatever a step had
        prepared: `/agent cancel`, a newer push, the watchdog or a worker that took the job
        over all land here, even when they came after the step's last check."""
        if self.cancel.is_set():
            raise Cancelled()
        with self.db.read() as s:
            row = s.execute(
                select(Job.state, Job.lease_owner).where(Job.id == self.job.id)
            ).one_or_none()
        mine = row is not None and row.state == JobState.RUNNING
        if mine and self.owner is not None and row is not None:
            mine = row.lease_owner == self.owner
        if not mine:
            self.cancel.set()
            log.info("job %s is no longer this run's: nothing more is written", self.job.id)
            raise Cancelled()

    @contextmanager
    def cancel_watch(self, stop: Callable[[], None], interval: float = 1.0) -> Iterator[None]:
        """While inside, look at the job's state every `interval` seconds; once it is no
        longer running (`/agent cancel`, a newer push, a lost lease) set `cancel` and call
        `stop` (e.g. the sandbox's), so a long command ends now rather than at the next step."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(interval):
                try:
                    if not self.cancel.is_set():
                        with self.db.read() as s:
                            state = s.scalar(select(Job.state).where(Job.id == self.job.id))
                        if state == JobState.RUNNING:
                            continue
                except Exception:  # noqa: S112 - a database blip: look again next time
                    continue
                self.cancel.set()
                log.info("job %s is no longer wanted: stopping its sandbox", self.job.id)
                try:
                    stop()
                except Exception:
                    log.warning("could not stop job %s's sandbox", self.job.id, exc_info=True)
                return

        thread = threading.Thread(  # with the job's logging context: its lines carry job_id
            target=contextvars.copy_context().run,
            args=(watch,),
            name=f"cancel-watch-{self.job.id}",
            daemon=True,
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=30)

    def _save_steps(self) -> None:
        with self.db.transaction() as s:
            row = s.get(Job, self.job.id)
            if row is not None:
                row.steps = [step.to_json() for step in self.steps]
        self.events.publish(self.job.id, JobEvent.STEPS)
        self.tell("steps_changed")

    def tell(self, event: str, *args: Any) -> None:
        """Call `event` on every listener; a listener that fails is logged, not raised.
        With a feedback lane (a job's run), "steps_changed" goes to it and the job does not
        wait for GitHub; any other event first waits for what the lane holds."""
        if event == "steps_changed" and self.feedback is not None:
            seen = copy.copy(self)  # the steps as they are now, not when the lane gets to them
            seen.steps = [replace(step) for step in self.steps]
            self.feedback.submit(lambda: seen._tell_now(event))
            return
        self.settle_feedback()
        self._tell_now(event, *args)

    def settle_feedback(self) -> None:
        """Wait until the progress already told has been written (before a notice of the
        job's own, so that the status comment and it cannot both be new comments)."""
        if self.feedback is not None:
            self.feedback.settle()

    def sandboxes_removed(self, timeout: float = 120.0) -> None:
        """Wait until the sandboxes the job left are removed (before its outcome is final)."""
        if self.teardown is not None:
            self.teardown.finish(timeout)

    def _tell_now(self, event: str, *args: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, event)(self, *args)
            except Exception:
                log.warning("job listener failed on %s", event, exc_info=True)

    def _step_span(self, record: StepRecord) -> AbstractContextManager[Span | None]:
        """The step's span from the record's start, ended by `step`; nothing when off."""
        if self.tracer is None or record.started is None:
            return nullcontext()
        attributes: dict[str, AttributeValue] = {
            "onloop.step": record.name,
            "onloop.step.kind": str(record.kind),
            "onloop.job.id": self.job.id,
        }
        at = nanos(record.started)
        return span(
            self.tracer, f"step {record.name}", attributes, start_time=at, end_on_exit=False
        )

    @contextmanager
    def step(self, name: str, kind: StepKind = StepKind.DETERMINISTIC) -> Iterator[StepRecord]:
        """Record a step's state, duration and output tail on the job."""
        self.check_cancelled()
        record = StepRecord(name, kind, started=round(time.time(), 6))
        self.steps.append(record)
        self._save_steps()
        started = time.monotonic()
        traced: Span | None = None
        mark = self.teardown.begin() if self.teardown is not None else 0
        try:
            with self._step_span(record) as traced:
                yield record
        except Cancelled:
            record.state = StepState.CANCELLED
            raise
        except BaseException as exc:
            record.state = StepState.FAILED
            record.error = str(exc)[:500]
            raise
        else:
            record.state = StepState.SUCCEEDED
        finally:
            record.duration = round(time.monotonic() - started, 3)
            if self.teardown is not None:
                self.teardown.release(mark)
            if traced is not None and record.started is not None:  # the record's times
                traced.end(nanos(record.started) + nanos(record.duration))
            self.meter.observe(
                "step_duration_seconds", record.duration, kind=self.job.kind, step=name
            )
            audit.record(
                self.db,
                audit.STEP,
                repo=self.job.repo,
                job_id=self.job.id,
                detail={
                    "name": record.name,
                    "kind": str(record.kind),
                    "state": str(record.state),
                    "duration": record.duration,
                },
            )
            record.output = record.output[-OUTPUT_TAIL:]
            self._save_steps()
