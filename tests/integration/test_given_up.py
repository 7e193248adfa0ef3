"""A job whose worker died three times: failed in the database, and on GitHub its status comment
and check run `onloop/<kind>` say so once, from the dispatcher. Real database, PyGithub, Redis
(a broker of the test's own) and the GitHub double."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select, update
from structlog.testing import capture_logs

from app.core.settings import Settings
from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Job, JobState, utcnow
from tasks.feedback import listeners as feedback
from tasks.queue.dispatch import Dispatcher, settle_given_up
from tasks.runner.context import JobContext
from tasks.runner.lease import GIVEN_UP, claim, requeue_abandoned
from tasks.runner.steps import read_steps
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.redis_server import RedisServer

REPO = "octo/widgets"
MARK = "<!-- onloop:job-{}-status -->"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def pull_request_job(double: GitHubDouble, db: Database) -> tuple[Job, int, str]:
    """A `/agent review` job on a pull request, as intake records it; its number and head."""
    double.create_repo(REPO, files={"README.md": "widgets\n"})
    double.create_branch(REPO, "more")
    double.commit(REPO, "more", {"more.py": "X = 1\n"})
    number = double.create_pull(REPO, "more", user="alice").number
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
            live_key="review-1",
            params={"comment_id": asked.id},
            steps=[],
        )
        s.add(job)
        s.flush()
        s.expunge(job)
    return job, number, head


def worker_dies_in_the_sandbox(settings: Settings, db: Database, job_id: int, attempt: int) -> None:
    """A worker claims the job, shows it working (status comment, check run) and dies."""
    assert claim(db, job_id, f"worker-{attempt}", 60)
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
    plan = ["policy", "authorization", "sandbox"]
    github = GitHubApp.for_settings(settings)  # that worker's own
    ctx = JobContext(settings, db, job, github, github.meter, steps=read_steps(steps), plan=plan)
    for listener in feedback.listeners_for(ctx):
        listener.steps_changed(ctx)  # then the OOM killer: no `finished`
    with db.transaction() as s:  # its lease runs out
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def bot_comments(double: GitHubDouble, number: int) -> list[str]:
    return [c.body for c in double.comments(REPO, number) if c.user == double.app.bot_login]


def test_a_given_up_job_says_so_in_its_status_comment_and_check_run(
    github_double: GitHubDouble,
    db: Database,
    database_url: str,
    tmp_path: Path,
    broker: RedisServer,
) -> None:
    double = github_double
    job, number, head = pull_request_job(double, db)
    settings = settings_for(double, tmp_path, database_url=database_url, feedback_interval=0)
    for attempt in (1, 2):
        worker_dies_in_the_sandbox(settings, db, job.id, attempt)
        assert requeue_abandoned(db) == [job.id]
    worker_dies_in_the_sandbox(settings, db, job.id, 3)
    (working,) = bot_comments(double, number)
    assert "**Working**" in working
    (run,) = double.checks.for_commit(REPO, head)
    assert run.status == "in_progress"  # the same run, taken up again by each attempt

    celery = Celery("test", broker=broker.url, set_as_current=False)
    context = Worker(settings, db=db).jobs.context  # as the worker wires its dispatcher
    dispatcher = Dispatcher(db, celery, context)
    with capture_logs() as logged:
        dispatcher.step()  # the dispatcher gives up on the job and tells GitHub

    with db.read() as s:
        done = s.get(Job, job.id)
        assert done is not None
        assert (done.state, done.live_key, done.lease_owner) == (JobState.FAILED, None, None)
    (status,) = bot_comments(double, number)  # edited in place, not a second comment
    assert MARK.format(job.id) in status and "**Working**" not in status
    assert "**Failed** at step **sandbox**" in status
    assert "stopped 3 times" in status and "gave up" in status
    assert "Ask again with `/agent review`" in status  # what the person can do
    (run,) = double.checks.for_commit(REPO, head)
    assert (run.status, run.conclusion) == ("completed", "failure")
    assert run.output["title"].startswith("Failed: The worker running this job stopped 3 times")
    (told,) = [e for e in logged if e["event"] == "job.given_up"]
    assert told["log_level"] == "error" and told["job_id"] == job.id  # for the operator
    assert told["repo"] == REPO and "stopped 3 times" in told["error"]

    # idempotent: later sweeps, of this dispatcher or another, touch GitHub no more
    before = len(double.calls(method="PATCH"))
    dispatcher.step()
    Dispatcher(db, celery, Worker(settings, db=db).jobs.context).step()
    assert settle_given_up(context, db, "another-worker", hold=timedelta(0)) == []
    assert len(double.calls(method="PATCH")) == before
    assert len(bot_comments(double, number)) == 1
    assert len(double.checks.for_commit(REPO, head)) == 1


def test_feedback_that_github_refused_is_settled_by_a_later_sweep(
    github_double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    double = github_double
    job, number, head = pull_request_job(double, db)
    settings = settings_for(double, tmp_path, database_url=database_url, feedback_interval=0)
    for attempt in (1, 2, 3):
        worker_dies_in_the_sandbox(settings, db, job.id, attempt)
        requeue_abandoned(db)
    with db.read() as s:
        assert s.scalar(select(Job.lease_owner).where(Job.id == job.id)) == GIVEN_UP

    double.fail_next(status=422, method="PATCH", path_prefix=f"/repos/{REPO}/check-runs/")
    context = Worker(settings, db=db).jobs.context
    assert settle_given_up(context, db, "first", hold=timedelta(minutes=5)) == []
    assert settle_given_up(context, db, "second") == []  # the first one's claim still holds
    (run,) = double.checks.for_commit(REPO, head)
    assert run.status == "in_progress"

    with db.transaction() as s:  # the first one's claim runs out
        s.execute(
            update(Job)
            .where(Job.id == job.id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )
    assert settle_given_up(context, db, "second") == [job.id]
    (run,) = double.checks.for_commit(REPO, head)
    assert (run.status, run.conclusion) == ("completed", "failure")
    (status,) = bot_comments(double, number)  # edited twice, never posted again
    assert "**Failed**" in status and "stopped 3 times" in status
