"""`onloop beat`: the Celery beat scheduler, so periodic work is queued exactly once, and the
watchdog, which needs no worker and no Redis."""

from __future__ import annotations

import threading
from pathlib import Path

from app.core.logs import get_logger
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.store.db import Database
from tasks.queue.celery_app import create_celery
from tasks.queue.watchdog import Watchdog, settling_context

SCHEDULE_FILE = Path("var/celerybeat-schedule")
log = get_logger("onloop.beat")


def run_beat(settings: Settings, schedule: Path = SCHEDULE_FILE) -> None:
    """Run until stopped. Run one per deployment: two would queue every periodic task twice
    (harmless for the schedule tick, whose slots fire once however often it comes, but
    wasteful for the rest). The watchdog runs beside it when the App's settings are there."""
    celery = create_celery(settings)
    schedule.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    db: Database | None = None
    if missing := settings.missing():
        log.warning("watchdog.off", detail="the GitHub App is not configured", missing=missing)
    else:
        db = Database(settings.database_url)
        context = settling_context(settings, db, Telemetry(settings.redis_url))
        Watchdog(settings, db, context).start(stop)
    try:
        celery.Beat(
            schedule=str(schedule), loglevel=settings.log_level, quiet=True, redirect_stdouts=False
        ).run()
    finally:
        stop.set()
        if db is not None:
            db.dispose()
