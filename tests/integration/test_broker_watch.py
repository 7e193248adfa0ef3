"""The dispatcher's watch on the broker: a Redis that restarted, lost its data or came back
is noticed at the next look, and the queued jobs it holds no message for go out again at once;
jobs it still holds are not sent twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from app.core.queues import QUEUE
from app.core.settings import Settings
from app.store.db import Database
from app.web import create_app
from tasks.queue.broker import MARKER, UNACKED, BrokerChange, BrokerWatch
from tasks.queue.celery_app import create_celery
from tasks.queue.dispatch import Dispatcher, publish_pending
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver, load_fixture
from tests.integration.test_outbox import pending, queued_job_ids


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    redis_server = RedisServer(tmp_path).start()
    yield redis_server
    redis_server.stop()


def restart_empty(server: RedisServer) -> None:
    """redis-server stopped and started again on its port, without persistence: empty."""
    server.stop()
    server.start()


def labeled(number: int) -> dict[str, Any]:
    data = load_fixture("issues.labeled")
    data["label"]["name"] = "agent:fix"
    data["issue"]["number"] = number
    data["installation"] = {"id": 1}
    return data


def record_jobs(settings: Settings, db: Database, count: int) -> list[int]:
    """`count` jobs recorded by the web and published to the broker."""
    client = create_app(settings, db=db).test_client()
    ids: list[int] = []
    for number in range(1, count + 1):
        response = deliver(client, "issues", labeled(number))
        assert response.status_code == 202, response.get_data(as_text=True)
        ids += response.get_json()["jobs"]
    assert publish_pending(db, create_celery(settings)) == count
    return ids


def test_the_watch_tells_a_restart_a_loss_and_a_return(server: RedisServer) -> None:
    watch = BrokerWatch.from_url(server.url)
    assert watch.look() is BrokerChange.FORGOT  # a Redis onloop never marked
    assert watch.look() is BrokerChange.STEADY
    redis.Redis.from_url(server.url).flushdb()
    assert watch.look() is BrokerChange.FORGOT  # its data went, the server did not
    assert watch.look() is BrokerChange.STEADY
    server.stop()
    assert watch.look() is BrokerChange.DOWN
    server.start()
    assert watch.look() is BrokerChange.FORGOT  # back, and empty
    # back with its data (persistence), but another run: its last second may be lost
    redis.Redis.from_url(server.url).set("onloop:broker-marker", "1")
    run_id = redis.Redis.from_url(server.url).info("server")["run_id"]
    server.stop()
    server.start()
    redis.Redis.from_url(server.url).set(MARKER, "1")  # as if kept on disk
    assert redis.Redis.from_url(server.url).info("server")["run_id"] != run_id
    assert watch.look() is BrokerChange.RESTARTED
    assert watch.look() is BrokerChange.STEADY


def test_a_redis_restart_without_data_republishes_at_the_next_step(
    settings: Settings, db: Database, server: RedisServer
) -> None:
    settings = settings.model_copy(update={"redis_url": server.url})
    job_ids = record_jobs(settings, db, 3)
    dispatcher = Dispatcher(
        db,
        create_celery(settings),
        context=lambda job: None,  # type: ignore[arg-type,return-value]
        broker=BrokerWatch.from_url(server.url),
        broker_interval=0,
    )
    dispatcher.step()  # the first look marks the broker; every job still has its message
    assert sorted(queued_job_ids(server.url)) == sorted(job_ids)
    restart_empty(server)
    assert queued_job_ids(server.url) == []
    # the default sweep (ONLOOP_REPUBLISH_AFTER, 120 s) would wait; the watch does not
    dispatcher.step()
    assert pending(db) == 0
    assert sorted(queued_job_ids(server.url)) == sorted(job_ids)
    dispatcher.step()  # nothing changed since: nothing is sent twice
    assert sorted(queued_job_ids(server.url)) == sorted(job_ids)


def test_only_jobs_without_a_message_go_out_again(
    settings: Settings, db: Database, server: RedisServer
) -> None:
    """After a database outage (or a broker blip) the dispatcher looks into the broker: a
    message still queued or delivered to a worker is not sent twice."""
    settings = settings.model_copy(update={"redis_url": server.url})
    waiting, delivered, lost = record_jobs(settings, db, 3)
    client = redis.Redis.from_url(server.url)
    raws = {
        job_id: raw
        for job_id, raw in zip(queued_job_ids(server.url), client.lrange(QUEUE, 0, -1), strict=True)
    }
    client.delete(QUEUE)
    client.rpush(QUEUE, raws[waiting])
    # a worker took this one and has not acknowledged it (kombu keeps it in `unacked`)
    client.hset(UNACKED, "tag-1", b"[" + raws[delivered] + b', "", "onloop"]')
    watch = BrokerWatch.from_url(server.url)
    assert watch.job_ids_held() == {waiting, delivered}
    dispatcher = Dispatcher(
        db,
        create_celery(settings),
        context=lambda job: None,  # type: ignore[arg-type,return-value]
        broker=watch,
    )
    assert dispatcher.recover() == [lost]
    assert publish_pending(db, create_celery(settings)) == 1
    assert sorted(queued_job_ids(server.url)) == sorted([waiting, lost])
