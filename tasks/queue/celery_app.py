"""The Celery app factory: built from settings by the worker; tasks take only a job id."""

from __future__ import annotations

import runpy
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from celery import Celery
from celery.exceptions import Reject
from celery.worker import state as worker_state

from app.core.queues import (
    ADVANCE_CAMPAIGNS,
    PURGE_BACKUPS,
    PURGE_JOB_OUTPUT,
    QUEUE,
    REDELIVER_MISSED,
    RUN_JOB,
    SCHEDULE_TICK,
)
from app.core.settings import Settings
from tasks.queue.outage import Outage
from tasks.runner.run import JobUnread

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "celery.py"
Requeue = Callable[[float], None]
RunJob = Callable[[int, Requeue], str]  # (job id, ask again in N seconds) -> outcome
# Seconds between a job's reads while the database does not answer: doubling up to the cap,
# so a job runs within PAUSE_MAX of the database coming back.
PAUSE_FIRST, PAUSE_MAX = 0.5, 2.0
PURGE_INTERVAL = 6 * 3600.0  # seconds between purges of expired rebase backup refs
PURGE_SECONDS = 3600.0  # how often beat purges job output older than ONLOOP_JOB_LOG_DAYS
TICK_SECONDS = 60.0  # how often beat looks for due `schedules:` slots (they are to the minute)
CAMPAIGN_SECONDS = 60.0  # beat's safety net: every campaign looked at again this often


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
            "purge-backups": {"task": PURGE_BACKUPS, "schedule": PURGE_INTERVAL},
            "purge-job-output": {"task": PURGE_JOB_OUTPUT, "schedule": PURGE_SECONDS},
            # Each beat sends it; a slot's row fires the slot once (tasks/queue/schedules.py).
            "schedule-tick": {"task": SCHEDULE_TICK, "schedule": TICK_SECONDS},
            "advance-campaigns": {"task": ADVANCE_CAMPAIGNS, "schedule": CAMPAIGN_SECONDS},
        },
    }


def create_celery(
    settings: Settings,
    run_job: RunJob | None = None,
    redeliver: Callable[[], list[str]] | None = None,
    purge_backups: Callable[[], list[str]] | None = None,
    purge: Callable[[], int] | None = None,
    tick: Callable[[], int] | None = None,
    campaigns: Callable[[], int] | None = None,
) -> Celery:
    """A Celery app for `settings`. The worker passes what its tasks run; a sender (the
    dispatcher's tests, beat) needs only the names."""
    if not settings.redis_url:
        raise ValueError("ONLOOP_REDIS_URL is not set")
    celery = Celery("onloop", set_as_current=False)
    # Each task is this app's alone (shared=False): Celery's default, shared=True, also hands
    # the task to every app finalized later in the process, which then runs the first app's
    # callable under that name, not its own
    # (Celery.task in https://github.com/celery/celery/blob/main/celery/app/base.py).
    celery.conf.update(celery_config(settings))
    if run_job is not None:
        _register_run_job(celery, run_job)
    if redeliver is not None:
        sweep = redeliver

        @celery.task(name=REDELIVER_MISSED, ignore_result=True, shared=False)
        def _redeliver_missed() -> list[str]:
            return sweep()

    if purge_backups is not None:
        purge_refs = purge_backups

        @celery.task(name=PURGE_BACKUPS, ignore_result=True, shared=False)
        def _purge_backups() -> list[str]:
            return purge_refs()

    if purge is not None:
        purge_output = purge

        @celery.task(name=PURGE_JOB_OUTPUT, ignore_result=True, shared=False)
        def _purge_job_output() -> int:
            return purge_output()

    if tick is not None:
        fire_due = tick

        @celery.task(name=SCHEDULE_TICK, ignore_result=True, shared=False)
        def _schedule_tick() -> int:
            return fire_due()

    if campaigns is not None:
        wake_campaigns = campaigns

        @celery.task(name=ADVANCE_CAMPAIGNS, ignore_result=True, shared=False)
        def _advance_campaigns() -> int:
            return wake_campaigns()  # the dispatchers' sweep then advances them

    return celery


def stopping() -> bool:
    """The worker was asked to stop (warm or cold). Celery sets these flags from its signal
    handlers; a flag may be 0, the exit code."""
    flags = (worker_state.should_stop, worker_state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


def until_read(run: Callable[[], str], outage: Outage, stop: Callable[[], bool] = stopping) -> str:
    """`run()`; while the database cannot read or claim the job, wait and run it again.

    The message meanwhile stays unacknowledged (acks_late): Celery would acknowledge a task
    that failed, and `self.retry` drops the message when the broker is down too
    (celery.app.task.Task.retry raises Reject(requeue=False)). When the worker is asked to
    stop first, the message goes back to the queue. The outage is logged once, not per job.
    """
    pause = PAUSE_FIRST
    while True:
        try:
            outcome = run()
        except JobUnread as exc:
            outage.noticed(str(exc))
            if _waited_out(pause, stop):
                raise Reject(str(exc), requeue=True) from None
            pause = min(pause * 2, PAUSE_MAX)
            continue
        outage.over()
        return outcome


def _waited_out(seconds: float, stop: Callable[[], bool]) -> bool:
    """Sleep `seconds`, or less when the worker is stopping; True in that case."""
    deadline = time.monotonic() + seconds
    while not stop():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.25))
    return True


def _register_run_job(celery: Celery, run_job: RunJob) -> None:
    """The job task: it takes the job id and nothing else."""
    outage = Outage("jobs")  # this app's: one worker, one line per outage

    @celery.task(name=RUN_JOB, ignore_result=True, shared=False)
    def _run_job(job_id: int) -> str:
        def requeue(seconds: float) -> None:
            _run_job.apply_async(args=[int(job_id)], countdown=seconds, queue=QUEUE)

        return until_read(partial(run_job, int(job_id), requeue), outage)
