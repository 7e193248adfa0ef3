"""A real `onloop worker` whose database is down: the job messages it takes are never
acknowledged unread; the job runs once the database is back (or, when the worker is stopped
meanwhile, its message is back in Redis), and the outage is one log line, not a traceback per
message. And the sweep that republishes a lost message runs at ONLOOP_REPUBLISH_AFTER."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select, update

from app.core.queues import QUEUE
from app.core.settings import Settings
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState, Outbox, utcnow
from app.web import create_app
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import publish_pending
from tests.doubles.db_outage import DatabaseOutage
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until

REPO = "octo/hello"


@dataclass
class World:
    double: GitHubDouble
    settings: Settings  # the web's and the test's: the database as it is
    worker_settings: Settings  # the worker's: the database through the outage
    db: Database
    client: Any
    redis: RedisServer
    outage: DatabaseOutage

    def running_worker(self, log: Path) -> WorkerProcess:
        """A worker that has run a job: past its start-up check of the database."""
        if self.settings.database_url.startswith("sqlite"):
            pytest.skip(
                "a process keeps an SQLite file it has open: the outage is PostgreSQL's here, "
                "tests/integration/test_job_read_outage.py covers SQLite"
            )
        worker = WorkerProcess(self.worker_settings, log).start()
        probe = self.job("/agent dance")  # its reply is the help text
        wait_until(lambda: self.state(probe) in TERMINAL_STATES, 60, "the worker's first job")
        return worker

    def job(self, command: str = "/agent status") -> int:
        """A recorded job for `command` on the pull request, published to Redis."""
        body = pr_comment(self.double, REPO, 1, command)
        response = deliver(self.client, "issue_comment", body)
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        assert publish_pending(self.db, create_celery(self.settings)) == 1
        return int(job_id)

    def state(self, job_id: int) -> str | None:
        with self.db.read() as s:
            return s.scalar(select(Job.state).where(Job.id == job_id))

    def publishes(self, job_id: int) -> int:
        with self.db.read() as s:
            count = s.scalar(
                select(func.count()).select_from(Outbox).where(Outbox.job_id == job_id)
            )
            return int(count or 0)

    def replies(self, job_id: int) -> list[Any]:
        """The bot's comments on the pull request for the job."""
        bot, mark = self.double.app.bot_login, f"<!-- onloop:job-{job_id} -->"
        return [c for c in self.double.comments(REPO, 1) if c.user == bot and mark in c.body]

    def queue_length(self) -> int:
        return int(redis.Redis.from_url(self.redis.url).llen(QUEUE))


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    server = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double, tmp_path, database_url=database_url, redis_url=server.url
    )
    outage = DatabaseOutage(database_url, tmp_path / "outage")
    # A day: whatever runs the job in these tests, it is not the sweep's second message.
    worker_settings = settings.model_copy(
        update={"database_url": outage.url, "republish_after": 86400}
    )
    github_double.create_repo(REPO, files={"README.md": "hello\n"})
    github_double.create_branch(REPO, "feature")
    github_double.commit(REPO, "feature", {"app.py": "print('hi')\n"}, message="feature")
    github_double.create_pull(REPO, "feature", title="Feature", user="alice")
    github_double.set_permission(REPO, "octocat", "write")
    db = Database(database_url)
    client = create_app(settings, db=db).test_client()
    yield World(github_double, settings, worker_settings, db, client, server, outage)
    outage.close()
    db.dispose()
    server.stop()


def queued_job_ids(url: str) -> list[int]:
    """The job ids in the Celery queue, read from the raw kombu messages in Redis."""
    raws = redis.Redis.from_url(url).lrange(QUEUE, 0, -1)
    return [int(json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]) for raw in raws]


def outage_lines(log: str, who: str) -> list[str]:
    return [line for line in log.splitlines() if "database.unavailable" in line and who in line]


def test_a_job_taken_while_the_database_is_down_runs_when_it_is_back(
    world: World, tmp_path: Path
) -> None:
    worker = world.running_worker(tmp_path / "worker.log")
    world.outage.down()
    try:
        job_id = world.job()
        wait_until(lambda: world.queue_length() == 0, 30, "the worker to take the message")
        time.sleep(4)  # several reads fail meanwhile
        assert world.state(job_id) == JobState.QUEUED and not world.replies(job_id)
        world.outage.up()
        back = time.monotonic()
        wait_until(lambda: world.state(job_id) in TERMINAL_STATES, 30, "the job after the outage")
        took = time.monotonic() - back
    finally:
        worker.stop()
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert world.state(job_id) == JobState.SUCCEEDED, log[-4000:]
    assert took < 15, took  # retried within seconds, not at the sweep
    assert world.publishes(job_id) == 1  # the first message ran it: nothing was republished
    assert len(world.replies(job_id)) == 1
    # one line for the outage from the jobs' side, one from the dispatcher's, no tracebacks
    assert len(outage_lines(log, "who=jobs")) == 1, log[-4000:]
    assert len(outage_lines(log, "who=dispatcher")) == 1, log[-4000:]
    during = log.split("database.unavailable", 1)[1].split("database.available", 1)[0]
    assert "Traceback" not in during, during


def test_a_worker_stopped_during_the_outage_puts_the_message_back(
    world: World, tmp_path: Path
) -> None:
    worker = world.running_worker(tmp_path / "worker.log")
    world.outage.down()
    try:
        job_id = world.job()
        wait_until(lambda: world.queue_length() == 0, 30, "the worker to take the message")
        time.sleep(2)  # its reads fail meanwhile
        stopping = time.monotonic()
        worker.stop()
        assert time.monotonic() - stopping < 15  # it does not wait for the database
        assert queued_job_ids(world.redis.url) == [job_id], worker.output()
        assert outage_lines((tmp_path / "worker.log").read_text(), "who=jobs")
        assert world.state(job_id) == JobState.QUEUED
        world.outage.up()
        worker = WorkerProcess(world.worker_settings, tmp_path / "worker2.log").start()
        wait_until(lambda: world.state(job_id) in TERMINAL_STATES, 60, "the job on a new worker")
    finally:
        worker.stop()
    assert world.state(job_id) == JobState.SUCCEEDED, worker.output()
    assert world.publishes(job_id) == 1 and len(world.replies(job_id)) == 1


def test_a_lost_message_is_published_again_after_the_setting(world: World, tmp_path: Path) -> None:
    job_id = world.job()
    redis.Redis.from_url(world.redis.url).delete(QUEUE)  # as a Redis restart without persistence
    with world.db.transaction() as s:  # its message went out 30 s ago
        s.execute(update(Outbox).values(published_at=utcnow() - timedelta(seconds=30)))
    settings = world.worker_settings.model_copy(update={"republish_after": 10})
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        wait_until(lambda: world.state(job_id) in TERMINAL_STATES, 30, "the republished job")
    finally:
        worker.stop()
    assert world.state(job_id) == JobState.SUCCEEDED, worker.output()
    assert world.publishes(job_id) == 2 and len(world.replies(job_id)) == 1
