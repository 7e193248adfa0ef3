"""The watchdog's sweep: a job past its time limit plus ONLOOP_WATCHDOG_GRACE ends `abandoned`
or `never_started`, its status comment says what happened and what to do, its check run
concludes `timed_out`; with Redis unreachable. Real database, PyGithub and the GitHub double."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import case, select, update

from app.core.settings import Settings
from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Job, JobState, utcnow
from tasks.feedback import listeners as feedback
from tasks.queue.dispatch import Dispatcher
from tasks.queue.watchdog import Watchdog
from tasks.runner.context import Cancelled, JobContext
from tasks.runner.lease import claim, renew, requeue_abandoned
from tasks.runner.steps import read_steps
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.redis_server import free_port

REPO = "octo/widgets"
MARK = "<!-- onloop:job-{}-status -->"
LONG_AGO = timedelta(hours=3)  # past the default bound: 3600 s + 300 s


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    """The double with `octo/widgets` and alice's pull request #1 from `more`."""
    github_double.create_repo(REPO, files={"README.md": "widgets\n"})
    github_double.create_branch(REPO, "more")
    github_double.commit(REPO, "more", {"more.py": "X = 1\n"})
    github_double.create_pull(REPO, "more", user="alice")
    return github_double


def no_redis(
    double: GitHubDouble, tmp_path: Path, database_url: str, **overrides: object
) -> Settings:
    """Settings whose Redis nobody listens on: the watchdog must not need it."""
    return settings_for(
        double,
        tmp_path,
        database_url=database_url,
        feedback_interval=0,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        **overrides,
    )


def review_job(double: GitHubDouble, db: Database, key: str = "review-1") -> tuple[Job, int, str]:
    """A `/agent review` job on a pull request, as intake records it; its number and head."""
    number = 1
    head = double.branch_sha(REPO, "more")
    assert head is not None
    asked = double.add_comment(REPO, number, "/agent review", "alice")
    installation = double.installation_for(double.repo(REPO))
    assert installation is not None
    with db.transaction() as s:
        job = Job(
            kind="review_pr",
            repo=REPO,
            number=number,
            installation_id=installation.id,
            requested_by="alice",
            head_sha=head,
            live_key=key,
            params={"comment_id": asked.id},
            steps=[],
        )
        s.add(job)
        s.flush()
        s.expunge(job)
    return job, number, head


def working(settings: Settings, db: Database, job_id: int, owner: str) -> JobContext:
    """A worker claims the job and shows it working (status comment, check run in_progress);
    the context of that run."""
    assert claim(db, job_id, owner, 600)
    steps = [
        {"name": "policy", "state": "succeeded"},
        {"name": "authorization", "state": "succeeded"},
        {"name": "sandbox", "state": "running"},
    ]
    with db.transaction() as s:
        s.execute(update(Job).where(Job.id == job_id).values(steps=steps))
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
    github = GitHubApp.for_settings(settings)
    ctx = JobContext(settings, db, job, github, github.meter, steps=read_steps(steps), owner=owner)
    ctx.plan = ["policy", "authorization", "sandbox"]
    for listener in feedback.listeners_for(ctx):
        listener.steps_changed(ctx)
    return ctx


def backdate(db: Database, job_id: int, by: timedelta, **more: object) -> None:
    then = utcnow() - by
    with db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(created_at=then, started_at=case((Job.started_at.is_(None), None), else_=then))
            .values(**more)
        )


def bot_comments(double: GitHubDouble, number: int) -> list[str]:
    return [c.body for c in double.comments(REPO, number) if c.user == double.app.bot_login]


def watchdog(settings: Settings, db: Database) -> Watchdog:
    return Worker(settings, db=db).watchdog()  # as the worker wires its dispatcher


def test_a_running_job_past_its_bound_is_abandoned_and_github_shows_it(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    job, number, head = review_job(double, db)
    run = working(settings, db, job.id, "worker-1")  # its lease is live: the worker hangs
    (status,) = bot_comments(double, number)
    assert "**Working**" in status
    (check,) = double.checks.for_commit(REPO, head)
    assert check.status == "in_progress"
    backdate(db, job.id, LONG_AGO)

    assert watchdog(settings, db).sweep() == [job.id]

    with db.read() as s:
        done = s.get(Job, job.id)
        assert done is not None
        assert (done.state, done.live_key, done.lease_owner) == (JobState.FAILED, None, None)
        assert done.result["outcome"] == "abandoned" and done.result["was"] == "running"
    (status,) = bot_comments(double, number)  # edited in place, not a second comment
    assert MARK.format(job.id) in status and "**Working**" not in status
    assert "**Failed** at step **sandbox**" in status
    assert "still not finished 65 min after it started" in status  # what happened
    assert "Ask again with `/agent review`" in status  # what the person can do
    (check,) = double.checks.for_commit(REPO, head)
    assert (check.status, check.conclusion) == ("completed", "timed_out")

    # the hung worker is stopped and may write nothing more
    assert not renew(db, job.id, "worker-1", 600)
    with pytest.raises(Cancelled):
        run.before_write()
    assert run.cancel.is_set()

    before = len(double.calls(method="PATCH")) + len(double.calls(method="POST"))
    assert watchdog(settings, db).sweep() == []  # idempotent: told once
    assert len(double.calls(method="PATCH")) + len(double.calls(method="POST")) == before


def test_a_job_no_worker_started_says_so_in_a_status_comment(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    job, number, head = review_job(double, db)
    backdate(db, job.id, LONG_AGO)
    assert bot_comments(double, number) == []

    assert watchdog(settings, db).sweep() == [job.id]

    with db.read() as s:
        done = s.get(Job, job.id)
        assert done is not None and done.state == JobState.FAILED
        assert done.result["outcome"] == "never_started"
    (status,) = bot_comments(double, number)
    assert MARK.format(job.id) in status and "**Failed**" in status
    assert "no onloop worker started it" in status and "nothing was changed" in status
    assert "Ask again with `/agent review`" in status
    assert double.checks.for_commit(REPO, head) == []  # it never had one


def test_a_job_requeued_after_its_worker_died_and_never_run_again_is_abandoned(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    job, number, head = review_job(double, db)
    working(settings, db, job.id, "worker-1")
    backdate(db, job.id, LONG_AGO, lease_expires_at=utcnow() - timedelta(seconds=1))
    assert requeue_abandoned(db) == [job.id]  # queued again; no worker takes it

    assert watchdog(settings, db).sweep() == [job.id]

    with db.read() as s:
        assert s.scalar(select(Job.result).where(Job.id == job.id))["outcome"] == "abandoned"
    (check,) = double.checks.for_commit(REPO, head)
    assert (check.status, check.conclusion) == ("completed", "timed_out")
    (status,) = bot_comments(double, number)
    assert "**Working**" not in status and "gave up on it" in status


def test_jobs_within_their_bound_waiting_or_final_are_left_alone(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    fresh_running, _, _ = review_job(double, db, "a")
    working(settings, db, fresh_running.id, "worker-1")
    fresh_queued, _, _ = review_job(double, db, "b")
    waiting, _, _ = review_job(double, db, "c")
    backdate(db, waiting.id, LONG_AGO, state=JobState.WAITING_FOR_AUTHORIZATION)
    done, _, _ = review_job(double, db, "d")
    backdate(db, done.id, LONG_AGO, state=JobState.SUCCEEDED, live_key=None)
    calls = len(double.calls())

    assert watchdog(settings, db).sweep() == []

    with db.read() as s:
        states = {row.id: row.state for row in s.execute(select(Job.id, Job.state))}
    assert states == {
        fresh_running.id: JobState.RUNNING,
        fresh_queued.id: JobState.QUEUED,
        waiting.id: JobState.WAITING_FOR_AUTHORIZATION,
        done.id: JobState.SUCCEEDED,
    }
    assert len(double.calls()) == calls


def test_a_small_time_limit_and_grace_bound_the_job(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    """ONLOOP_JOB_TIME_LIMIT may be as small as 1 s; the bound is the limit plus the grace."""
    settings = no_redis(double, tmp_path, database_url, job_time_limit=1, watchdog_grace=30)
    job, _, _ = review_job(double, db)
    working(settings, db, job.id, "worker-1")
    backdate(db, job.id, timedelta(seconds=20))
    assert watchdog(settings, db).sweep() == []  # 20 s < 1 s + 30 s
    backdate(db, job.id, timedelta(seconds=40))
    assert watchdog(settings, db).sweep() == [job.id]


def test_each_worker_runs_the_watchdog_from_its_dispatcher_at_start(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    job, _, head = review_job(double, db)
    working(settings, db, job.id, "worker-1")
    backdate(db, job.id, LONG_AGO)
    celery = Celery("test", broker=settings.redis_url, set_as_current=False)  # never reached
    worker = Worker(settings, db=db)
    sweep = worker.watchdog().sweep
    dispatcher = Dispatcher(db, celery, worker.jobs.context, watchdog=sweep, watchdog_interval=3600)

    dispatcher.step()  # the first step sweeps

    (check,) = double.checks.for_commit(REPO, head)
    assert (check.status, check.conclusion) == ("completed", "timed_out")


def test_before_write_refuses_once_the_job_is_not_this_runs(
    double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = no_redis(double, tmp_path, database_url)
    job, _, _ = review_job(double, db)
    run = working(settings, db, job.id, "worker-1")
    run.before_write()  # still its own: nothing raised

    with db.transaction() as s:  # `/agent cancel` lands
        s.execute(update(Job).where(Job.id == job.id).values(state=JobState.CANCELLED))
    with pytest.raises(Cancelled):
        run.before_write()

    other, _, _ = review_job(double, db, "other")
    first = working(settings, db, other.id, "worker-1")
    backdate(db, other.id, timedelta(0), lease_expires_at=utcnow() - timedelta(seconds=1))
    assert requeue_abandoned(db) == [other.id]
    assert claim(db, other.id, "worker-2", 600)  # another worker took it over
    with pytest.raises(Cancelled):
        first.before_write()
