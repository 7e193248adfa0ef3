"""The outbox bell: intake rings it after a commit that made jobs, the dispatcher wakes up.

A Redis pub/sub message on one channel. Ringing never blocks a request: it sets a flag that
one thread per process turns into a single PUBLISH, however many commits rang meanwhile (so
a group commit's batch, or a burst of them, costs one round trip), and PUBLISHes are at
least SPACING apart: a ring after a quiet spell is published at once, a steady stream of
them 50 times a second (each one a round trip was ~5 % of a web worker's CPU at 1,000
deliveries/s). A lost ring costs only latency: the dispatcher still polls the outbox every
ONLOOP_DISPATCH_INTERVAL.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import redis
from redis.client import PubSub

log = logging.getLogger(__name__)

CHANNEL = "onloop:outbox"
TIMEOUT = 2.0  # seconds a Redis call may take
SPACING = 0.02  # seconds at least between two PUBLISHes of one process


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)


class OutboxBell:
    """Rings from any thread; with no Redis URL it does nothing."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._due = threading.Event()
        self._lock = threading.Lock()
        self._pid = 0  # the process whose thread rings (a fork starts its own)
        self.rung = 0  # PUBLISHes made, for tests and the curious

    def ring(self) -> None:
        """Say that jobs were committed; returns at once."""
        if self.url is None:
            return
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._due = threading.Event()
                    threading.Thread(target=self._loop, name="outbox-bell", daemon=True).start()
        self._due.set()

    def _loop(self) -> None:
        assert self.url is not None
        client, due = _client(self.url), self._due
        while True:
            due.wait()
            due.clear()  # rings after this point make another PUBLISH
            try:
                client.publish(CHANNEL, b"1")
                self.rung += 1
            except redis.RedisError as exc:  # the dispatcher's poll finds the jobs
                log.debug("outbox bell not rung: %s", type(exc).__name__)
                time.sleep(0.5)
            time.sleep(SPACING)  # rings meanwhile share the next PUBLISH


class BellListener:
    """The dispatcher's ear: `wait(seconds)` returns early when the bell rang."""

    def __init__(self, url: str | None) -> None:
        self._client = _client(url) if url else None
        self._pubsub: PubSub | None = None

    def _subscribed(self) -> PubSub | None:
        if self._client is None:
            return None
        if self._pubsub is None:
            try:
                pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(CHANNEL)
            except redis.RedisError as exc:
                log.debug("outbox bell not heard: %s", type(exc).__name__)
                return None
            self._pubsub = pubsub
        return self._pubsub

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Until the bell rings, `stop` is set or `seconds` pass (listening in slices of at
        most a second, so a stop is seen soon). Whether it rang. Without Redis, a plain wait."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pubsub = self._subscribed()
            if pubsub is None:
                stop.wait(min(left, 1.0))
                continue
            try:
                if pubsub.get_message(timeout=min(left, 1.0)) is not None:
                    self._drain(pubsub)
                    return True
            except (redis.RedisError, OSError, ValueError) as exc:
                log.debug("outbox bell lost: %s", type(exc).__name__)
                self.close()
                stop.wait(min(left, 1.0))
        return False

    @staticmethod
    def _drain(pubsub: PubSub) -> None:
        """Rings already queued are answered by the same drain of the outbox."""
        while pubsub.get_message(timeout=0) is not None:
            pass

    def close(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except redis.RedisError:
                pass
