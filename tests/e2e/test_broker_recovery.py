"""A real `onloop worker` whose Redis restarts without its data while jobs are queued: the
dispatcher notices at its next look and publishes them again at once (not after
ONLOOP_REPUBLISH_AFTER, set to a day here), and every job finishes once."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState, Outbox
from app.web import create_app
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import publish_pending
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until
from tests.integration.test_outbox import queued_job_ids

REPO = "octo/hello"
JOBS = 5
CONCURRENCY = 2  # tests.doubles.worker_proc: messages a frozen worker may have taken


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    redis_server = RedisServer(tmp_path).start()
    yield redis_server
    redis_server.stop()


@pytest.fixture
def settings(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, server: RedisServer
) -> Settings:
    github_double.create_repo(REPO, files={"README.md": "hello\n"})
    github_double.create_branch(REPO, "feature")
    github_double.commit(REPO, "feature", {"app.py": "print('hi')\n"}, message="feature")
    github_double.create_pull(REPO, "feature", title="Feature", user="alice")
    github_double.set_permission(REPO, "octocat", "write")
    base = settings_for(github_double, tmp_path, database_url=database_url, redis_url=server.url)
    # a day: whatever publishes the lost jobs again here, it is not the periodic sweep
    return base.model_copy(update={"republish_after": 86400})


def states(db: Database, job_ids: list[int]) -> dict[int, str]:
    with db.read() as s:
        rows = s.execute(select(Job.id, Job.state).where(Job.id.in_(job_ids))).all()
        return {int(job_id): str(state) for job_id, state in rows}


def publishes(db: Database, job_id: int) -> int:
    with db.read() as s:
        count = s.scalar(select(func.count()).select_from(Outbox).where(Outbox.job_id == job_id))
        return int(count or 0)


def test_jobs_lost_in_a_redis_restart_are_published_again_at_once(
    github_double: GitHubDouble, settings: Settings, server: RedisServer, tmp_path: Path
) -> None:
    db = Database(settings.database_url)
    client = create_app(settings, db=db).test_client()

    def record(command: str) -> int:
        response = deliver(client, "issue_comment", pr_comment(github_double, REPO, 1, command))
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        return int(job_id)

    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        probe = record("/agent dance")  # the worker runs one job: it is up and has looked
        wait_until(lambda: states(db, [probe])[probe] in TERMINAL_STATES, 60, "the first job")
        assert worker.proc is not None
        os.killpg(worker.proc.pid, signal.SIGSTOP)  # it takes nothing while the jobs queue up
        try:
            job_ids = [record("/agent status") for _ in range(JOBS)]
            assert len(set(job_ids)) == JOBS
            assert publish_pending(db, create_celery(settings)) == JOBS
            server.stop()
            server.start()  # without persistence: the messages are gone, the rows say sent
            assert queued_job_ids(server.url) == []
        finally:
            os.killpg(worker.proc.pid, signal.SIGCONT)
        wait_until(
            lambda: all(s in TERMINAL_STATES for s in states(db, job_ids).values()),
            90,  # bounded well below the sweep's day (and its 120 s default)
            "the lost jobs",
        )
    finally:
        worker.stop()
    log = worker.output()
    assert set(states(db, job_ids).values()) == {JobState.SUCCEEDED}, log
    # Lost once, sent again. A message the frozen worker had already taken off the queue
    # (a blocking pop in flight) may run its job before the dispatcher looks.
    again = [job_id for job_id in job_ids if publishes(db, job_id) == 2]
    assert len(again) >= JOBS - CONCURRENCY, log
    assert all(publishes(db, job_id) <= 2 for job_id in job_ids), log
    assert "dispatch.republished_lost" in (tmp_path / "worker.log").read_text(), log
    # each job ran once, whichever of its messages came first (a queued job is claimed once)
    full = (tmp_path / "worker.log").read_text(errors="replace")
    for job_id in job_ids:
        finished = re.findall(rf"job\.finished .*job_id={job_id} ", full)
        assert len(finished) == 1, log
    db.dispose()
