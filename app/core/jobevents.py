"""A job's live events over Redis pub/sub: the worker says a job changed, every web process
streaming its page hears it (app/web/pages/stream.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from enum import StrEnum
from typing import Any

import redis
from redis.client import PubSub

log = logging.getLogger(__name__)


class JobEvent(StrEnum):
    """What changed about a job."""

    STEPS = "steps"  # a step began or ended
    OUTPUT = "output"  # new sandbox output
    STATE = "state"  # the job's state (finished, cancelled)


def channel(job_id: int) -> str:
    return f"onloop:job:{int(job_id)}:events"


class JobEvents:
    """Publishes and subscribes to job events; with no Redis it publishes nothing (the page
    then polls). A failed publish is logged and dropped: the page catches up on its next."""

    def __init__(self, url: str | None) -> None:
        self.client: redis.Redis | None = (
            redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2) if url else None
        )

    def publish(self, job_id: int, event: JobEvent, **data: Any) -> None:
        if self.client is None:
            return
        try:
            self.client.publish(channel(job_id), json.dumps({"event": str(event), **data}))
        except redis.RedisError as exc:
            log.debug("job event not published: %s", type(exc).__name__)

    def listen(self, job_id: int, every: float) -> Iterator[dict[str, Any] | None]:
        """The job's events as they come; None after `every` seconds without one (a chance to
        send a keep-alive). Subscribed before this returns, so nothing published after the
        call is missed. Ends when Redis goes away (the page falls back to polling)."""
        if self.client is None:
            return iter(())
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel(job_id))
        except redis.RedisError as exc:
            log.info("job event stream not started: %s", type(exc).__name__)
            pubsub.close()
            return iter(())
        return self._messages(pubsub, every)

    @staticmethod
    def _messages(pubsub: PubSub, every: float) -> Iterator[dict[str, Any] | None]:
        try:
            while True:
                message = pubsub.get_message(timeout=every)
                if message is None:
                    yield None
                    continue
                try:
                    yield dict(json.loads(message["data"]))
                except (ValueError, TypeError):
                    continue
        except redis.RedisError as exc:
            log.info("job event stream ended: %s", type(exc).__name__)
        finally:
            pubsub.close()
