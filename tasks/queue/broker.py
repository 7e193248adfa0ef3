"""The broker as the dispatcher watches it: whether Redis came back, restarted or forgot its
data, and which jobs still have a message in it."""

from __future__ import annotations

import base64
import json
import re
from enum import Enum

import redis

from app.core.logs import get_logger
from app.core.queues import QUEUE

log = get_logger("onloop.broker")

# A key that only a Redis that kept its data still has: gone after a restart without
# persistence, a FLUSHDB or a failover to an empty replica.
MARKER = "onloop:broker-marker"
UNACKED = "unacked"  # kombu's Redis transport: messages delivered to a worker, not yet acked
TIMEOUT = 2.0  # seconds one look at the broker may take
_TASK_ID = re.compile(r"^job-(\d+)-\d+$")  # tasks.queue.dispatch.publish_pending names them so


class BrokerChange(Enum):
    """What one look at the broker found, against the look before."""

    STEADY = "steady"  # it answered, as last time
    DOWN = "down"  # it did not answer
    BACK = "back"  # it answers again after it did not
    RESTARTED = "restarted"  # another run of redis-server (INFO's run_id changed)
    FORGOT = "forgot"  # the marker is gone: so is whatever was queued

    @property
    def may_have_lost_messages(self) -> bool:
        return self in (BrokerChange.BACK, BrokerChange.RESTARTED, BrokerChange.FORGOT)


class BrokerWatch:
    """One dispatcher's view of the Redis its jobs go through."""

    def __init__(self, client: redis.Redis, queue: str = QUEUE) -> None:
        self.client, self.queue = client, queue
        self._down = False
        self._run_id: str | None = None

    @classmethod
    def from_url(cls, url: str) -> BrokerWatch:
        client = redis.Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
        return cls(client)

    def look(self) -> BrokerChange:
        """Look once: set the marker if it is missing, read the server's run id."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(MARKER, "1", nx=True)
            pipe.info("server")
            created, info = pipe.execute(raise_on_error=False)
        except redis.RedisError:
            self._down = True
            return BrokerChange.DOWN
        if isinstance(created, Exception):  # a read-only replica: no marker, run id alone
            created = None
        run_id = str(info.get("run_id") or "") if isinstance(info, dict) else ""
        was_down, self._down = self._down, False
        before, self._run_id = self._run_id, run_id or self._run_id
        if created:
            return BrokerChange.FORGOT
        if was_down:
            return BrokerChange.BACK
        if before and run_id and run_id != before:
            return BrokerChange.RESTARTED
        return BrokerChange.STEADY

    def job_ids_held(self) -> set[int]:
        """The jobs with a message in the broker: waiting in the queue, or delivered to a
        worker and not yet acknowledged. Raises redis.RedisError when it does not answer."""
        pipe = self.client.pipeline(transaction=False)
        pipe.lrange(self.queue, 0, -1)
        pipe.hvals(UNACKED)
        waiting, delivered = pipe.execute()
        held: set[int] = set()
        for raw in waiting:
            held.update(_job_id(_parsed(raw)))
        for raw in delivered:  # [message, exchange, routing key]
            entry = _parsed(raw)
            held.update(_job_id(entry[0] if isinstance(entry, list) and entry else None))
        return held


def _parsed(raw: bytes | str) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _job_id(message: object) -> set[int]:
    """The job id of one kombu message (its task id, else its first argument)."""
    if not isinstance(message, dict):
        return set()
    try:
        headers = message.get("headers") or {}
        match = _TASK_ID.match(str(headers.get("id") or ""))
        if match:
            return {int(match.group(1))}
        args = json.loads(base64.b64decode(message["body"]))[0]
        return {int(args[0])}
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return set()
