"""The Celery app factory: built from settings by the worker; tasks take only a job id."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from celery import Celery

from app.settings import Settings

CONFIG_FILE = Path(__file__).resolve().parent.parent / "config" / "celery.py"
RUN_JOB = "onloop.run_job"
QUEUE = "onloop"


def celery_config(settings: Settings) -> dict[str, Any]:
    """config/celery.py plus what depends on onloop's settings."""
    static = {k: v for k, v in runpy.run_path(str(CONFIG_FILE)).items() if not k.startswith("_")}
    return {
        **static,
        "broker_url": settings.redis_url,
        # Redis redelivers unacknowledged tasks after this long; it must exceed the longest
        # job or a running job would be handed to a second worker
        # (https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout).
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout,
            "socket_connect_timeout": 2,
            "socket_timeout": 5,
        },
        "task_time_limit": settings.job_time_limit + 60,
        "task_soft_time_limit": settings.job_time_limit,
        "beat_schedule": {
            "redeliver-missed": {
                "task": "onloop.redeliver_missed",
                "schedule": float(settings.redeliver_interval),
            },
        },
    }


def create_celery(settings: Settings) -> Celery:
    """A Celery app for `settings` with onloop's tasks registered on it."""
    if not settings.redis_url:
        raise ValueError("ONLOOP_REDIS_URL is not set")
    celery = Celery("onloop", set_as_current=False)
    celery.conf.update(celery_config(settings))

    from tasks import jobs, redeliver

    jobs.register(celery, settings)
    redeliver.register(celery, settings)
    return celery
