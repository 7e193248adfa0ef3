"""`onloop beat`: the Celery beat scheduler alone, so periodic work is queued exactly once."""

from __future__ import annotations

from pathlib import Path

from app.core.settings import Settings
from tasks.queue.celery_app import create_celery

SCHEDULE_FILE = Path("var/celerybeat-schedule")


def run_beat(settings: Settings, schedule: Path = SCHEDULE_FILE) -> None:
    """Run until stopped. Run one per deployment: two would queue every periodic task twice."""
    celery = create_celery(settings)
    schedule.parent.mkdir(parents=True, exist_ok=True)
    celery.Beat(
        schedule=str(schedule), loglevel=settings.log_level, quiet=True, redirect_stdouts=False
    ).run()
