"""A job read while the database is down (SQLite and PostgreSQL): the read fails as
JobUnread and changes nothing; the job task waits and runs the job once the database
answers, or hands the message back to the queue when the worker stops first."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import Reject

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState
from app.web import create_app
from tasks.queue.celery_app import until_read
from tasks.queue.outage import Outage
from tasks.runner.run import JobUnread
from tasks.worker import Worker
from tests.doubles.db_outage import DatabaseOutage
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import wait_until

REPO = "octo/hello"


@pytest.fixture
def down(
    github_double: GitHubDouble, settings: Settings, db: Database, tmp_path: Path
) -> Iterator[tuple[int, DatabaseOutage, Worker]]:
    """A recorded `/agent status` job, the database down, and a worker that never reached it."""
    real = settings_for(
        github_double, tmp_path, database_url=settings.database_url, redis_url=settings.redis_url
    )
    github_double.create_repo(REPO, files={"README.md": "hello\n"})
    github_double.create_branch(REPO, "feature")
    github_double.commit(REPO, "feature", {"app.py": "print('hi')\n"}, message="feature")
    github_double.create_pull(REPO, "feature", title="Feature", user="alice")
    github_double.set_permission(REPO, "octocat", "write")
    client = create_app(real, db=db).test_client()
    response = deliver(client, "issue_comment", pr_comment(github_double, REPO, 1, "/agent status"))
    (job_id,) = response.get_json()["jobs"]
    outage = DatabaseOutage(real.database_url, tmp_path / "outage")
    outage.down()
    worker = Worker(real.model_copy(update={"database_url": outage.url}))
    yield int(job_id), outage, worker
    worker.close()
    outage.close()


def job(db: Database, job_id: int) -> Job:
    with db.read() as s:
        row = s.get(Job, job_id)
        assert row is not None
        return row


def replies(double: GitHubDouble, job_id: int) -> list[Any]:
    mark = f"<!-- onloop:job-{job_id} -->"
    return [
        c for c in double.comments(REPO, 1) if c.user == double.app.bot_login and mark in c.body
    ]


def test_a_job_unread_is_unchanged(down: tuple[int, DatabaseOutage, Worker], db: Database) -> None:
    job_id, _, worker = down
    with pytest.raises(JobUnread, match=f"job {job_id} unread: OperationalError"):
        worker.jobs.run(job_id)
    row = job(db, job_id)
    assert row.state == JobState.QUEUED and row.attempts == 0 and row.lease_owner is None


def test_the_job_task_waits_for_the_database_then_runs_the_job(
    down: tuple[int, DatabaseOutage, Worker], db: Database, github_double: GitHubDouble
) -> None:
    job_id, outage, worker = down
    seen = Outage("jobs")
    outcome: list[str] = []
    task = threading.Thread(
        target=lambda: outcome.append(until_read(partial(worker.jobs.run, job_id), seen))
    )
    task.start()
    wait_until(lambda: seen.down, 10, "the outage noticed")
    time.sleep(2)  # a few reads fail meanwhile
    assert task.is_alive() and job(db, job_id).state == JobState.QUEUED
    outage.up()
    task.join(timeout=20)
    assert outcome == [JobState.SUCCEEDED] and not seen.down
    assert job(db, job_id).attempts == 1 and len(replies(github_double, job_id)) == 1


def test_a_stopping_worker_hands_the_message_back(
    down: tuple[int, DatabaseOutage, Worker], db: Database
) -> None:
    job_id, _, worker = down
    stopping = threading.Event()
    threading.Timer(1.0, stopping.set).start()
    started = time.monotonic()
    with pytest.raises(Reject) as rejected:
        until_read(partial(worker.jobs.run, job_id), Outage("jobs"), stop=stopping.is_set)
    assert rejected.value.requeue is True
    assert time.monotonic() - started < 5
    assert job(db, job_id).state == JobState.QUEUED
