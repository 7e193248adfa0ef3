"""How a job's runner ended, as a state and a stored result: one table of exceptions."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from github.GithubException import RateLimitExceededExceedsMaxWait

from app.github.clients import AppNotConfigured, InstallationUnavailable
from app.policy.images import ImageNotAllowed
from app.store.models import Job, JobState
from tasks.runner.context import JobFailed, WaitForAuthorization
from tasks.sandbox.base import DiskLimitExceeded
from tasks.sandbox.egress.fitness import ImageUnfit

Outcome = tuple[JobState, dict[str, Any]]


class Overdue(StrEnum):
    """The `outcome` the watchdog gives a job still not final past its time limit and grace
    (tasks.runner.overdue): its state is `failed`, its check run concludes `timed_out`."""

    ABANDONED = "abandoned"  # it started (running, or queued again after a worker died)
    NEVER_STARTED = "never_started"  # no worker ever claimed it


def too_long(limit: int) -> str:
    return (
        f"the job ran past onloop's time limit ({limit} s) and was stopped; ask again, "
        "perhaps for a smaller change"
    )


def _waiting(exc: Exception, job: Job) -> Outcome:
    return JobState.WAITING_FOR_AUTHORIZATION, {"waiting": str(exc)}


def _failed(exc: Exception, job: Job) -> Outcome:
    assert isinstance(exc, JobFailed)
    return JobState.FAILED, {"error": exc.message, **exc.result}


def _installation_gone(exc: Exception, job: Job) -> Outcome:
    """Not an internal error: the operator's to fix."""
    assert isinstance(exc, InstallationUnavailable)
    account = job.repo.split("/", 1)[0]
    message = (
        f"onloop's installation on {account} is gone or suspended; reinstall or unsuspend the App"
    )
    if exc.status == 401:  # the App's own credentials were refused, not the installation
        message = (
            "GitHub refused onloop's App credentials; the operator should check "
            "ONLOOP_APP_ID and the private key (`onloop doctor`)"
        )
    return JobState.FAILED, {"error": message, "github_status": exc.status}


def _not_configured(exc: Exception, job: Job) -> Outcome:
    """The operator's to fix, said in one line: no traceback, no internal error."""
    assert isinstance(exc, AppNotConfigured)
    return JobState.FAILED, {"error": AppNotConfigured.MESSAGE, "missing": exc.missing}


def _image_refused(exc: Exception, job: Job) -> Outcome:
    """The repository named an image the operator does not allow: the message says which are."""
    assert isinstance(exc, ImageNotAllowed)
    return JobState.FAILED, {"error": exc.message, "rule": "config"}


def _disk_full(exc: Exception, job: Job) -> Outcome:
    assert isinstance(exc, DiskLimitExceeded)
    return JobState.FAILED, {"error": exc.message, "rule": "disk"}


def _image_unfit(exc: Exception, job: Job) -> Outcome:
    """The operator's sandbox image cannot run setup's proxy: the message names the image and
    `onloop sandbox build-image`."""
    assert isinstance(exc, ImageUnfit)
    return JobState.FAILED, {"error": exc.message, "rule": "sandbox_image"}


def _rate_limited(exc: Exception, job: Job) -> Outcome:
    message = (
        "GitHub's rate limit for onloop is used up for longer than a job may wait; "
        "ask again once it resets (usually within the hour)"
    )
    return JobState.FAILED, {"error": message}


# Checked in order; the first class the exception is an instance of decides. No row for
# Celery's SoftTimeLimitExceeded: the worker runs the threads pool, which never raises it, and
# a job's own time limit is JobRunner's (tasks/runner/run.py).
OUTCOMES: tuple[tuple[type[Exception], Callable[[Exception, Job], Outcome]], ...] = (
    (WaitForAuthorization, _waiting),
    (JobFailed, _failed),
    (ImageNotAllowed, _image_refused),
    (DiskLimitExceeded, _disk_full),
    (ImageUnfit, _image_unfit),
    (InstallationUnavailable, _installation_gone),
    (AppNotConfigured, _not_configured),
    (RateLimitExceededExceedsMaxWait, _rate_limited),
)


def outcome_of(exc: Exception, job: Job) -> Outcome:
    """The state and result a runner's exception ends `job` with. Anything not in the table
    is an internal error: its result says only the exception's type, and `crashed` asks the
    caller to log the traceback."""
    for kind, outcome in OUTCOMES:
        if isinstance(exc, kind):
            return outcome(exc, job)
    return JobState.FAILED, {"error": f"internal error: {type(exc).__name__}", "crashed": True}
