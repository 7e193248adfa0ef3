"""End to end through the webhook, the outbox, Redis, a real `onloop worker` process and the
GitHub double: replies land once, and a worker killed mid-job leaves no trace but one reply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until

REPO = "octo/hello"


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> Iterator[tuple[GitHubDouble, Settings, Database, Any]]:
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double, tmp_path, database_url=database_url, redis_url=redis.url, github_pacing=False
    )
    github_double.create_repo(REPO, files={"README.md": "hello\n"})
    github_double.create_branch(REPO, "feature")
    github_double.commit(REPO, "feature", {"app.py": "print('hi')\n"}, message="feature")
    github_double.create_pull(REPO, "feature", title="Feature", user="alice")
    github_double.set_permission(REPO, "octocat", "write")  # who comments: may have answers
    db = Database(database_url)
    client = create_app(settings, db=db).test_client()
    yield github_double, settings, db, client
    db.dispose()
    redis.stop()


def job_state(db: Database, job_id: int) -> str | None:
    with db.read() as s:
        job = s.get(Job, job_id)
        return job.state if job else None


def bot_comments(double: GitHubDouble, number: int) -> list[Any]:
    return [c for c in double.comments(REPO, number) if c.user == double.app.bot_login]


def test_help_reply_lands_once(world: Any, tmp_path: Path) -> None:
    double, settings, db, client = world
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        response = deliver(client, "issue_comment", pr_comment(double, REPO, 1, "/agent dance"))
        assert response.status_code == 202
        (job_id,) = response.get_json()["jobs"]
        wait_until(lambda: job_state(db, job_id) in TERMINAL_STATES, 60, "the help job")
    finally:
        worker.stop()
    assert job_state(db, job_id) == JobState.SUCCEEDED, worker.output()
    (comment,) = bot_comments(double, 1)
    assert "I don't know the command `/agent dance`" in comment.body
    assert "/agent rebase" in comment.body
    assert f"<!-- onloop:job-{job_id} -->" in comment.body


def test_worker_killed_mid_job_runs_it_again_once(world: Any, tmp_path: Path) -> None:
    double, settings, db, client = world
    # The first look for the job's comment hangs, so the worker is mid-job when it dies.
    double.delay_next(seconds=30, method="GET", path_prefix=f"/repos/{REPO}/issues/1/comments")
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    response = deliver(client, "issue_comment", pr_comment(double, REPO, 1, "/agent status"))
    (job_id,) = response.get_json()["jobs"]
    try:
        wait_until(lambda: job_state(db, job_id) == JobState.RUNNING, 60, "the job to start")
        wait_until(
            lambda: double.calls(method="GET", path_prefix=f"/repos/{REPO}/issues/1/comments"),
            30,
            "the worker to reach GitHub",
        )
        worker.kill()
        assert job_state(db, job_id) == JobState.RUNNING and not bot_comments(double, 1)
        worker = WorkerProcess(settings, tmp_path / "worker2.log").start()
        wait_until(lambda: job_state(db, job_id) in TERMINAL_STATES, 90, "the rerun")
    finally:
        worker.stop()
    assert job_state(db, job_id) == JobState.SUCCEEDED, worker.output()
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.attempts == 2
    assert len(bot_comments(double, 1)) == 1
