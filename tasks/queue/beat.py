"""`onloop beat`: the Celery beat scheduler, so periodic work is queued exactly once, and the
watchdog, which needs no worker and no Redis."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from app.core.logs import get_logger
from app.core.settings import Settings
from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Job
from tasks.queue.celery_app import create_celery
from tasks.queue.watchdog import Watchdog
from tasks.runner.context import JobContext
from tasks.runner.steps import read_steps

SCHEDULE_FILE = Path("var/celerybeat-schedule")
log = get_logger("onloop.beat")


def settling_context(
    settings: Settings, db: Database, github: GitHubApp
) -> Callable[[Job], JobContext]:
    """A context for a job outside its run, to settle its feedback on GitHub (as the worker's
    JobRunner.context, without the worker)."""

    def context(job: Job) -> JobContext:
        return JobContext(settings, db, job, github, github.meter, steps=read_steps(job.steps))

    return context


def run_beat(settings: Settings, schedule: Path = SCHEDULE_FILE) -> None:
    """Run until stopped. Run one per deployment: two would queue every periodic task twice.
    The watchdog runs beside it when the App's settings are there to reach GitHub."""
    celery = create_celery(settings)
    schedule.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    db: Database | None = None
    if missing := settings.missing():
        log.warning("watchdog.off", detail="the GitHub App is not configured", missing=missing)
    else:
        db = Database(settings.database_url)
        github = GitHubApp.for_settings(settings)
        Watchdog(settings, db, settling_context(settings, db, github)).start(stop)
    try:
        celery.Beat(
            schedule=str(schedule), loglevel=settings.log_level, quiet=True, redirect_stdouts=False
        ).run()
    finally:
        stop.set()
        if db is not None:
            db.dispose()
