"""`onloop worker`: the worker's composition root, which builds every collaborator once."""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from datetime import timedelta
from functools import partial

import redis
from celery import Celery

from app.core.jobevents import JobEvents
from app.core.kinds import KINDS, Kind, Kinds
from app.core.outbox_bell import BellListener
from app.core.queues import QUEUE
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.core.tracing import Tracing
from app.github.clients import GitHubApp
from app.github.conditional import ETagCache
from app.github.write_slots import WriteSlots
from app.policy.org_config import OrgConfigLoader
from app.store import campaigns as campaign_store
from app.store import joblog
from app.store.db import Database
from app.store.deployment import deployment_id
from tasks.blueprints.address_review import run_address_review
from tasks.blueprints.allow import run_allow
from tasks.blueprints.apply import run_apply
from tasks.blueprints.campaign import run_campaign_change
from tasks.blueprints.fix_ci import run_fix_ci
from tasks.blueprints.fix_issue import run_fix_issue
from tasks.blueprints.fixers import run_fixers
from tasks.blueprints.rebase import run_rebase
from tasks.blueprints.replies import run_cancel, run_help, run_status
from tasks.blueprints.resume import run_continue
from tasks.blueprints.review import run_review
from tasks.feedback import listeners as feedback
from tasks.queue import backups, campaign_ops, redeliver, schedules
from tasks.queue.broker import BrokerWatch
from tasks.queue.campaigns import CampaignWaker, Coordinator
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import Dispatcher
from tasks.queue.watchdog import Watchdog, settling_context
from tasks.runner.context import JobContext, JobListener, Runner
from tasks.runner.limits import Limiter
from tasks.runner.quota import Once
from tasks.runner.run import JobRunner, Listeners
from tasks.sandbox.workplace import Workplace, make_workplace, reap_sandboxes

# What runs each kind of job: one entry per kind of app.core.kinds.KINDS (a test holds
# them to the same keys). A new kind is a row there, a row here and its blueprint.
RUNNERS: Mapping[str, Runner] = {
    Kind.FIX_ISSUE: run_fix_issue,
    Kind.REBASE_PR: run_rebase,
    Kind.FIX_CI: run_fix_ci,
    Kind.REVIEW_PR: run_review,
    Kind.HELP: run_help,
    Kind.CANCEL: run_cancel,
    Kind.STATUS: run_status,
    Kind.ALLOW: run_allow,
    Kind.CONTINUE: run_continue,
    Kind.ADDRESS_REVIEW: run_address_review,
    Kind.APPLY_SUGGESTIONS: run_apply,
    Kind.RUN_FIXERS: run_fixers,  # schedules
    Kind.CAMPAIGN_CHANGE: run_campaign_change,
}


class Worker:
    """Settings, database, GitHub (one set of write slots), metrics, traces, caps, sandboxes,
    runners, listeners and the organisation file's loader of one worker process. Tests build
    one with their own runners or listeners instead of patching modules."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: Database | None = None,
        runners: Mapping[str, Runner] = RUNNERS,
        listeners: Listeners = feedback.listeners_for,
        kinds: Kinds = KINDS,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self.db = db if db is not None else Database(settings.database_url)
        self.kinds = kinds
        # Traces as the OTEL_* variables say, unless a test brings its own (app.core.tracing).
        self._own_tracing = tracing is None
        self.tracing = tracing if tracing is not None else Tracing.from_env("onloop-worker")
        self.tracing.instrument_worker(self.db.engine)
        self.meter = Telemetry(settings.redis_url)
        self.github = GitHubApp(settings, WriteSlots.for_settings(settings), self.meter)
        self.etags = ETagCache()  # the schedule tick's reads of every repository's config
        self.limiter: Limiter | None = None
        self.once: Once | None = None
        if settings.redis_url:
            client = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
            self.limiter = Limiter.from_settings(settings, client)
            self.once = Once(client)
        self._workplace: Workplace | None = None
        self._workplace_lock = threading.Lock()
        self.campaigns = Coordinator(settings, self.db, self.github)
        self._listeners = listeners
        self.jobs = JobRunner(
            settings,
            self.db,
            runners,
            github=self.github,
            meter=self.meter,
            listeners=self.listeners,
            queued=feedback.queued,
            limiter=self.limiter,
            once=self.once,
            workplace=self.workplace,
            kinds=kinds,
            org_config=OrgConfigLoader(),
            tracer=self.tracing.tracer("onloop.jobs"),
            events=JobEvents(settings.redis_url),
        )

    def listeners(self, ctx: JobContext) -> list[JobListener]:
        """A campaign job is followed by its campaign (the tracking issue says how it went);
        every other job by its status comment and check run."""
        if ctx.job.kind == Kind.CAMPAIGN_CHANGE:
            return [CampaignWaker(self.campaigns)]
        return self._listeners(ctx)

    def workplace(self) -> Workplace:
        """The sandbox backend, mirrors, snapshots and warm pool, made on first use: with the
        Docker backend that is the reaper's first sweep, at start-up."""
        with self._workplace_lock:
            if self._workplace is None:
                self._workplace = make_workplace(self.settings, deployment_id(self.db))
            return self._workplace

    def celery(self) -> Celery:
        """A Celery app whose tasks run this worker's jobs, redelivery sweep and backup purge."""
        celery = create_celery(
            self.settings,
            run_job=self.jobs.run,
            redeliver=partial(redeliver.sweep, self.settings, self.github, self.db),
            purge_backups=partial(backups.sweep, self.settings, self.github, self.db),
            purge=self.purge_output,
            tick=self.schedule_tick,
            campaigns=self.campaign_tick,
        )
        self.tracing.instrument_celery(celery)  # traced: the default app until shutdown
        return celery

    def campaign_tick(self) -> int:
        """Beat's campaign task: the configuration repository's campaign files picked up,
        then every campaign not closed asked to advance (the dispatchers' sweep does it)."""
        try:
            campaign_ops.pick_up(self.campaigns)
        finally:
            asked = campaign_store.request_all(self.db)
        return asked

    def purge_output(self) -> int:
        """Beat's hourly task: delete job output older than ONLOOP_JOB_LOG_DAYS."""
        return joblog.purge(self.db, self.settings.job_log_days)

    def schedule_tick(self) -> int:
        """Beat's minutely task: start the `schedules:` slots now due; how many it claimed."""
        return len(
            schedules.tick(self.settings, self.github, self.db, self.etags, kinds=self.kinds)
        )

    def watchdog(self) -> Watchdog:
        """The watchdog this worker's dispatcher runs: the database and GitHub only."""
        context = settling_context(self.settings, self.db, self.meter, self.kinds)
        return Watchdog(self.settings, self.db, context)

    def reap(self) -> list[str]:
        """Remove sandboxes, networks and workspaces whose job is not running."""
        backend = self.workplace().backend if self.settings.sandbox_backend == "docker" else None
        return reap_sandboxes(self.settings, self.db, backend)

    def close(self) -> None:
        """Remove the warm pool's idle containers and close the database."""
        with self._workplace_lock:
            place, self._workplace = self._workplace, None
        if place is not None:
            place.close()
        if self._own_tracing:
            self.tracing.shutdown()
        self.db.dispose()

    def run(self, concurrency: int = 4, beat: bool = False) -> None:
        """Run until stopped. Threads, not forks: jobs wait on sandboxes and GitHub, not CPU."""
        celery = self.celery()
        dispatcher = Dispatcher(
            self.db,
            celery,
            self.jobs.context,
            interval=self.settings.dispatch_interval,
            republish_after=timedelta(seconds=self.settings.republish_after),
            authorization_wait=timedelta(seconds=self.settings.authorization_wait),
            housekeeping=self.reap,
            housekeeping_interval=self.settings.reap_interval,
            watchdog=self.watchdog().sweep,
            watchdog_interval=self.settings.watchdog_interval,
            broker=BrokerWatch.from_url(self.settings.redis_url)
            if self.settings.redis_url
            else None,
            traced=self.tracing.enabled,
            bell=BellListener(self.settings.redis_url),
            campaigns=self.campaigns.sweep,
        )
        dispatcher.start()
        argv = [
            "--quiet",  # celery's own option: no banner, so every line printed is a log line
            "worker",
            f"--hostname=onloop@{socket.gethostname()}",
            "--pool=threads",
            f"--concurrency={concurrency}",
            f"--queues={QUEUE}",
            f"--loglevel={self.settings.log_level}",
            "--without-gossip",
            "--without-mingle",
        ]
        if beat:
            argv += ["--beat", "--schedule=var/celerybeat-schedule"]
        try:
            celery.worker_main(argv)
        finally:
            dispatcher.stop()
            self.close()


def run_worker(settings: Settings, concurrency: int = 4, beat: bool = False) -> None:
    """`onloop worker`: build the Worker and run it until stopped."""
    Worker(settings).run(concurrency, beat)
