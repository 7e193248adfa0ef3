"""The Celery app factory: built from settings by the worker; tasks take only a job id."""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery

from app.core.queues import QUEUE, REDELIVER_MISSED, RUN_JOB
from app.core.settings import Settings

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "celery.py"
Requeue = Callable[[float], None]
RunJob = Callable[[int, Requeue], str]  # (job id, ask again in N seconds) -> outcome


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
        # No task_time_limit: the threads pool ignores it; a job keeps its own limit
        # (tasks.runner.run), well under the visibility timeout.
        "beat_schedule": {
            "redeliver-missed": {
                "task": REDELIVER_MISSED,
                "schedule": float(settings.redeliver_interval),
            },
        },
    }


def create_celery(
    settings: Settings,
    run_job: RunJob | None = None,
    redeliver: Callable[[], list[str]] | None = None,
) -> Celery:
    """A Celery app for `settings`. The worker passes what its tasks run; a sender (the
    dispatcher's tests, beat) needs only the names."""
    if not settings.redis_url:
        raise ValueError("ONLOOP_REDIS_URL is not set")
    celery = Celery("onloop", set_as_current=False)
    celery.conf.update(celery_config(settings))
    if run_job is not None:
        _register_run_job(celery, run_job)
    if redeliver is not None:
        sweep = redeliver

        @celery.task(name=REDELIVER_MISSED, ignore_result=True)
        def _redeliver_missed() -> list[str]:
            return sweep()

    return celery


def _register_run_job(celery: Celery, run_job: RunJob) -> None:
    """The job task: it takes the job id and nothing else."""

    @celery.task(name=RUN_JOB, ignore_result=True)
    def _run_job(job_id: int) -> str:
        def requeue(seconds: float) -> None:
            _run_job.apply_async(args=[int(job_id)], countdown=seconds, queue=QUEUE)

        return run_job(int(job_id), requeue)
