"""A JobRunner for tests of the runner itself: the given runners, no one told on GitHub."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from app.core.settings import Settings
from app.github.clients import GitHubApp
from app.store.db import Database
from tasks.runner.context import JobContext, JobListener, Runner
from tasks.runner.limits import Limiter
from tasks.runner.run import JobRunner


def no_listeners(ctx: JobContext) -> list[JobListener]:
    return []


def not_told(ctx: JobContext, reason: str, place: int | None) -> None:
    return None


def quiet_runner(
    settings: Settings,
    db: Database,
    runners: Mapping[str, Runner],
    limiter: Limiter | None = None,
) -> JobRunner:
    """`runners` under a lease, the caps of `limiter` and the time limit, with no status
    comment, check run or queued notice (a Worker wires those)."""
    github = GitHubApp.for_settings(settings)
    return JobRunner(
        settings,
        db,
        runners,
        github=github,
        meter=github.meter,
        listeners=no_listeners,
        queued=not_told,
        limiter=limiter,
        once=None,
        workplace=None,
    )


def long_step(stopped: threading.Event, seconds: float = 600) -> Runner:
    """A runner whose one step would run for `seconds` in its sandbox, under the job's
    cancel watch (as every sandboxed step is): stopping the sandbox (`stopped`) ends it."""

    def runner(ctx: JobContext) -> dict[str, object]:
        with ctx.cancel_watch(stopped.set, interval=0.1):
            stopped.wait(seconds)
        ctx.check_cancelled()
        return {}

    return runner
