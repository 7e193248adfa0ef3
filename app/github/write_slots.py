"""A bounded number of concurrent GitHub writes per identity: leased slots in Redis that their
holder renews, so a killed holder's slot frees itself within the lease."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from app.core.settings import Settings

log = logging.getLogger("onloop.github")

SLOT_LEASE = 15.0  # seconds a slot outlives its holder's last renewal
SLOT_WAIT = 300.0  # seconds to wait for a slot before writing anyway
REDIS_TIMEOUT = 2.0  # seconds one Redis call may take before the slots go in-process only
REDIS_PAUSE = 5.0  # seconds Redis is not asked again after it failed to answer
KEY_PREFIX = "onloop:github-write-slots:"

# One sorted set per identity: member = a holder's token, score = when its lease ends (Redis
# server time, in ms, so holders on hosts with skewed clocks agree). Taking a slot drops the
# expired members first; a holder that already has a slot only renews it. The key itself
# expires with the longest lease, so an idle identity leaves nothing behind.
_TAKE = """
if redis.replicate_commands then redis.replicate_commands() end
local key, token = KEYS[1], ARGV[1]
local limit, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZSCORE', key, token) or redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now + lease, token)
  redis.call('PEXPIRE', key, lease)
  return 1
end
return 0
"""
_LIVE = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""


class WriteSlots:
    """At most `concurrency` writes at a time per key ("installation:<id>", "user:<login>"):
    a semaphore in this process, and leased slots across processes when Redis is configured.
    GitHub asks integrations to avoid concurrent requests for one identity
    (https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api#avoid-concurrent-requests);
    a small bound keeps to that while a slow write does not hold up every other.

    A holder renews its slot every third of the lease from a thread of this object, for as
    long as its write lasts (a write may wait out a rate limit). When Redis does not answer
    within REDIS_TIMEOUT, writes go on under the in-process bound alone for REDIS_PAUSE, so a
    frozen or unreachable Redis delays a write by seconds, never by a lease or a wait.
    """

    def __init__(
        self,
        redis_url: str | None,
        concurrency: int = 4,
        lease: float = SLOT_LEASE,
        wait: float = SLOT_WAIT,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency, self.lease, self.wait = concurrency, lease, wait
        self._redis = (
            redis.Redis.from_url(
                redis_url, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
            )
            if redis_url
            else None
        )
        self._take = self._redis.register_script(_TAKE) if self._redis is not None else None
        self._live = self._redis.register_script(_LIVE) if self._redis is not None else None
        self._guard = threading.Lock()
        self._local: dict[str, threading.BoundedSemaphore] = {}
        self._held: dict[str, str] = {}  # token -> key: the slots this process holds
        self._renewer: threading.Thread | None = None
        self._quiet_until = 0.0  # monotonic: Redis failed, in-process slots alone until then

    @classmethod
    def for_settings(cls, settings: Settings) -> WriteSlots:
        return cls(settings.redis_url, settings.github_write_concurrency)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """A slot for `key` while the block runs."""
        local = self._semaphore(key)
        with local:
            token = self._acquire(key)
            try:
                yield
            finally:
                if token is not None:
                    self._release(key, token)

    def live(self, key: str) -> int:
        """How many slots of `key` are held across processes now (-1: Redis did not answer)."""
        if self._live is None:
            return -1
        try:
            return int(self._live(keys=[KEY_PREFIX + key]))
        except redis.RedisError:
            return -1

    def _semaphore(self, key: str) -> threading.BoundedSemaphore:
        with self._guard:
            return self._local.setdefault(key, threading.BoundedSemaphore(self.concurrency))

    def _acquire(self, key: str) -> str | None:
        """Take a Redis slot; None when there is no Redis, it does not answer, or no slot
        came free within `wait` (the write then goes ahead, as a lock that timed out would)."""
        if self._take is None or time.monotonic() < self._quiet_until:
            return None
        token = uuid.uuid4().hex
        deadline = time.monotonic() + self.wait
        pause = 0.02
        while True:
            try:
                taken = self._take(
                    keys=[KEY_PREFIX + key],
                    args=[token, self.concurrency, int(self.lease * 1000)],
                )
            except redis.RedisError as exc:
                self._redis_failed(key, exc)
                return None
            if taken:
                self._keep(key, token)
                return token
            if time.monotonic() >= deadline:
                log.warning(
                    "no GitHub write slot for %s within %.0fs; writing anyway", key, self.wait
                )
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.25)

    def _release(self, key: str, token: str) -> None:
        with self._guard:
            self._held.pop(token, None)
        if self._redis is None or time.monotonic() < self._quiet_until:
            return  # its lease ends it
        try:
            self._redis.zrem(KEY_PREFIX + key, token)
        except redis.RedisError as exc:
            self._redis_failed(key, exc)

    def _redis_failed(self, key: str, exc: redis.RedisError) -> None:
        self._quiet_until = time.monotonic() + REDIS_PAUSE
        log.warning(
            "Redis did not answer for the GitHub write slots of %s (%s: %s); "
            "in-process slots only for %.0fs",
            key,
            type(exc).__name__,
            exc,
            REDIS_PAUSE,
        )

    def _keep(self, key: str, token: str) -> None:
        """Renew `token` until it is released; start the renewer when none runs."""
        with self._guard:
            self._held[token] = key
            if self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew, name="onloop-write-slots", daemon=True
                )
                self._renewer.start()

    def _renew(self) -> None:
        """The renewer thread: every third of the lease, renew each slot held; stop when
        none is."""
        while True:
            time.sleep(self.lease / 3)
            with self._guard:
                held = dict(self._held)
                if not held:
                    self._renewer = None
                    return
            if self._take is None or time.monotonic() < self._quiet_until:
                continue
            for token, key in held.items():
                with self._guard:
                    if token not in self._held:
                        continue  # released meanwhile: renewing would bring it back
                try:
                    self._take(
                        keys=[KEY_PREFIX + key],
                        args=[token, self.concurrency, int(self.lease * 1000)],
                    )
                except redis.RedisError as exc:
                    self._redis_failed(key, exc)
                    break
