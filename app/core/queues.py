"""Queue names shared by the web (its /metrics reads the queue) and the worker."""

from __future__ import annotations

QUEUE = "onloop"  # the Redis list Celery's job messages wait in
RUN_JOB = "onloop.run_job"  # the task that runs one job; it takes the job's id alone
REDELIVER_MISSED = "onloop.redeliver_missed"  # beat's sweep for deliveries that never arrived
PURGE_BACKUPS = "onloop.purge_backups"  # beat's purge of rebase backup refs past backup_days
PURGE_JOB_OUTPUT = (
    "onloop.purge_job_output"  # beat's hourly purge of job output past ONLOOP_JOB_LOG_DAYS
)
SCHEDULE_TICK = "onloop.schedule_tick"  # beat's minutely look for due `schedules:` slots
