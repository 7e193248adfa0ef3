"""The durable hand-off: deliveries are acknowledged while Redis is down, and every job
reaches the queue exactly once when it is back."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select, update

from app.core.queues import QUEUE, RUN_JOB
from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Outbox, utcnow
from app.web import create_app
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import publish_pending
from tasks.runner.lease import republish_unclaimed
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver, load_fixture


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def queued_job_ids(url: str) -> list[int]:
    """The job ids in the Celery queue, read from the raw kombu messages in Redis."""
    ids = []
    for raw in redis.Redis.from_url(url).lrange(QUEUE, 0, -1):
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        ids.append(int(body[0][0]))
    return ids


def pending(db: Database) -> int:
    with db.read() as s:
        return int(
            s.scalar(select(func.count()).select_from(Outbox).where(Outbox.published_at.is_(None)))
            or 0
        )


def labeled(number: int) -> dict[str, Any]:
    data = load_fixture("issues.labeled")
    data["label"]["name"] = "agent:fix"
    data["issue"]["number"] = number
    data["installation"] = {"id": 1}
    return data


def test_redis_outage_loses_nothing_and_duplicates_nothing(
    settings: Settings, db: Database, private_redis: RedisServer
) -> None:
    settings = settings.model_copy(update={"redis_url": private_redis.url})
    client = create_app(settings, db=db).test_client()
    celery = create_celery(settings)

    first = deliver(client, "issues", labeled(100))
    assert first.status_code == 202
    assert publish_pending(db, celery) == 1

    private_redis.stop()
    job_ids = list(first.get_json()["jobs"])
    for number in range(1, 21):
        response = deliver(client, "issues", labeled(number))
        assert response.status_code == 202, response.get_data(as_text=True)
        job_ids += response.get_json()["jobs"]
    assert publish_pending(db, celery) == 0  # the broker is down: nothing marked sent
    assert pending(db) == 20

    private_redis.start()
    sent = 0
    for _ in range(10):
        sent += publish_pending(db, celery, batch=7)
        if not pending(db):
            break
    assert sent == 20
    assert publish_pending(db, celery) == 0
    queued = queued_job_ids(private_redis.url)
    assert sorted(queued) == sorted(job_ids[1:])  # the first one went out before the outage...
    assert len(set(queued)) == len(queued) == 20  # ...and Redis lost it when it stopped.

    # The database still knows it is queued and unclaimed: it goes out again, once.
    assert republish_unclaimed(db, timedelta(hours=1)) == []
    with db.transaction() as s:
        s.execute(
            update(Outbox)
            .where(Outbox.job_id == job_ids[0])
            .values(published_at=utcnow() - timedelta(hours=2))
        )
    assert republish_unclaimed(db, timedelta(hours=1)) == [job_ids[0]]
    assert republish_unclaimed(db, timedelta(hours=1)) == []  # its new row is not yet sent
    assert publish_pending(db, celery) == 1
    assert sorted(queued_job_ids(private_redis.url)) == sorted(job_ids)


def test_visibility_timeout_exceeds_the_longest_job(settings: Settings) -> None:
    conf = create_celery(settings).conf
    assert conf.broker_transport_options["visibility_timeout"] > settings.job_time_limit + 60
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.task_time_limit is None  # the threads pool ignores it: the job keeps its own


def test_each_celery_app_runs_its_own_workers_jobs(settings: Settings) -> None:
    """Two workers' apps in one process (as tests build them): each app's job task runs the
    job runner it was built with, not the first app's, whatever other apps came before."""
    ran: list[str] = []
    first = create_celery(settings, run_job=lambda job_id, requeue: ran.append("first") or "")
    second = create_celery(settings, run_job=lambda job_id, requeue: ran.append("second") or "")
    second.tasks[RUN_JOB](7)
    first.tasks[RUN_JOB](7)
    assert ran == ["second", "first"]
