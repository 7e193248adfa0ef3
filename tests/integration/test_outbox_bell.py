"""Intake rings the outbox bell after it commits a job: the dispatcher publishes it at once,
not at its next poll; without the ring (Redis gone) the poll still finds it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.core.outbox_bell import CHANNEL, SPACING, BellListener, OutboxBell
from app.core.settings import Settings
from app.store.db import Database
from app.web import create_app
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import Dispatcher
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import wait_until
from tests.integration.test_outbox import labeled, pending, queued_job_ids


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of the test's own: pub/sub channels are shared by every database number."""
    redis_server = RedisServer(tmp_path).start()
    yield redis_server
    redis_server.stop()


def listening(url: str) -> bool:
    """Whether a dispatcher has subscribed to the bell (so its first step is done)."""
    counts = dict(redis.Redis.from_url(url).pubsub_numsub(CHANNEL))
    return int(counts.get(CHANNEL.encode(), 0)) > 0


def test_a_recorded_job_goes_out_without_waiting_for_the_poll(
    settings: Settings, db: Database, server: RedisServer
) -> None:
    settings = settings.model_copy(update={"redis_url": server.url})
    dispatcher = Dispatcher(
        db,
        create_celery(settings),
        context=lambda job: None,  # type: ignore[arg-type,return-value]
        interval=60.0,  # a poll would come a minute after the first, long after the wait below
        bell=BellListener(server.url),
    ).start()
    try:
        wait_until(lambda: listening(server.url), 10, "the dispatcher's first step")
        assert queued_job_ids(server.url) == []
        response = deliver(create_app(settings, db=db).test_client(), "issues", labeled(7))
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        wait_until(lambda: queued_job_ids(server.url) == [job_id], 20, "the job's message")
        assert pending(db) == 0
    finally:
        dispatcher.stop()


def test_without_the_bell_the_poll_still_publishes(
    settings: Settings, db: Database, server: RedisServer
) -> None:
    """The web rings a Redis that is gone: nothing fails, and the next poll sends the job."""
    settings = settings.model_copy(update={"redis_url": server.url})
    app = create_app(settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"}), db=db)
    response = deliver(app.test_client(), "issues", labeled(8))
    assert response.status_code == 202, response.get_data(as_text=True)
    (job_id,) = response.get_json()["jobs"]
    dispatcher = Dispatcher(
        db,
        create_celery(settings),
        context=lambda job: None,  # type: ignore[arg-type,return-value]
        interval=0.05,
        bell=BellListener("redis://127.0.0.1:1/0"),
    ).start()
    try:
        wait_until(lambda: queued_job_ids(server.url) == [job_id], 20, "the polled job")
    finally:
        dispatcher.stop()


def test_rings_of_one_burst_share_a_publish(server: RedisServer) -> None:
    """Many commits ring while one PUBLISH is under way: fewer PUBLISHes than rings, and
    the listener hears the last."""
    bell, ear = OutboxBell(server.url), BellListener(server.url)
    stop = threading.Event()
    assert not ear.wait(0.01, stop)  # subscribes
    for _ in range(200):
        bell.ring()
    wait_until(lambda: bell.rung >= 1, 10, "a publish")
    assert ear.wait(10, stop)
    assert 1 <= bell.rung < 200
    ear.close()


def test_a_steady_stream_of_rings_is_published_at_most_every_spacing(
    server: RedisServer,
) -> None:
    """Rings every millisecond for a fifth of a second (a web process at 1,000 commits a
    second): PUBLISHes at most SPACING apart, not one a ring; the listener still hears."""
    bell, ear = OutboxBell(server.url), BellListener(server.url)
    stop = threading.Event()
    assert not ear.wait(0.01, stop)  # subscribes
    began = time.monotonic()
    rings = 0
    while time.monotonic() - began < 0.2:
        bell.ring()
        rings += 1
        time.sleep(0.001)
    took = time.monotonic() - began
    assert ear.wait(10, stop)
    wait_until(lambda: bell.rung >= 1, 10, "a publish")
    time.sleep(2 * SPACING)  # the last ring's PUBLISH
    assert bell.rung <= took / SPACING + 2, (bell.rung, rings, took)
    assert rings > bell.rung, (bell.rung, rings)  # shared, not one a ring
    ear.close()
