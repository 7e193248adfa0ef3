"""The watchdog: every job reaches a final state, and GitHub shows it, within its bound."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from app.core.kinds import KINDS, Kinds
from app.core.logs import get_logger
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.github.clients import GitHubApp
from app.github.write_slots import WriteSlots
from app.store.db import Database
from app.store.models import Job
from tasks.queue.dispatch import settle_given_up
from tasks.runner.context import JobContext
from tasks.runner.lease import owner_id
from tasks.runner.overdue import Bound, mark_overdue
from tasks.runner.run import DATABASE_DOWN, why_down
from tasks.runner.steps import read_steps

log = get_logger("onloop.watchdog")


def settling_context(
    settings: Settings, db: Database, meter: Telemetry, kinds: Kinds = KINDS
) -> Callable[[Job], JobContext]:
    """A context for a job outside its run, to settle its feedback on GitHub. Its GitHubApp
    bounds its writes in this process only: Redis may not answer at all, and the watchdog
    must not wait for it."""
    github = GitHubApp(settings, WriteSlots(None, settings.github_write_concurrency), meter)

    def context(job: Job) -> JobContext:
        return JobContext(
            settings, db, job, github, meter, steps=read_steps(job.steps), kinds=kinds
        )

    return context


@dataclass
class Watchdog:
    """One sweep: jobs past their time limit plus ONLOOP_WATCHDOG_GRACE get a final outcome
    in the database (tasks.runner.overdue), then their status comment and check run are
    settled on GitHub through `context(job)`. It needs the database and GitHub only, never
    Redis nor the worker that ran the job: each worker's dispatcher runs it at start and
    every ONLOOP_WATCHDOG_INTERVAL, and so does `onloop beat`."""

    settings: Settings
    db: Database
    context: Callable[[Job], JobContext]
    owner: str = field(default_factory=owner_id)

    @property
    def bound(self) -> Bound:
        return Bound(
            timedelta(seconds=self.settings.job_time_limit),
            timedelta(seconds=self.settings.watchdog_grace),
        )

    def sweep(self) -> list[int]:
        """Mark what is overdue, then settle every marked job not yet told (this sweep's and
        earlier ones' whose GitHub calls failed); the ids settled now."""
        marked = mark_overdue(self.db, self.bound)
        for job_id, outcome in marked.items():
            log.error("watchdog.final", job_id=job_id, outcome=str(outcome))
        return settle_given_up(self.context, self.db, self.owner)

    def run(self, stop: threading.Event) -> None:
        """Sweep every ONLOOP_WATCHDOG_INTERVAL until `stop` is set, from the first moment;
        a database outage is logged and waited out."""
        interval = float(self.settings.watchdog_interval)
        down = False
        while True:
            try:
                self.sweep()
                if down:
                    log.info("watchdog.database_back")
                down = False
            except DATABASE_DOWN as exc:
                if not down:
                    log.warning("watchdog.database_down", error=why_down(exc))
                down = True
            except Exception as exc:
                log.warning("watchdog.failed", error=f"{type(exc).__name__}: {exc}")
            if stop.wait(interval):
                return

    def start(self, stop: threading.Event) -> threading.Thread:
        """Run in a daemon thread of its own (as `onloop beat` does)."""
        thread = threading.Thread(
            target=self.run, args=(stop,), name="onloop-watchdog", daemon=True
        )
        thread.start()
        return thread
