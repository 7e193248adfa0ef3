"""Caps on running jobs per installation and per repository, and a token bucket of job
starts, kept in Redis; a job over a limit stays queued and tries again, it is never dropped."""

from __future__ import annotations

import logging
import random
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import func, select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState

log = logging.getLogger(__name__)

SLOT_TTL = 120.0  # seconds a slot outlives its last renewal: a dead worker's slot frees itself
FULL_RETRY = 5.0  # seconds before a job that found the slots full asks again (plus jitter)

# Sorted sets of slot members "<job id>:<token>", one per admission, scored by lease expiry
# (ms, Redis clock). Expired leases are dropped first. Caps count distinct job ids: a second
# attempt of a job that holds a slot (a duplicate message, or a retry while a dead worker's
# slot lingers) is admitted on the same capacity and the DB claim decides which one runs.
# Returns 0, or 1/2 for installation/repo full.
_ACQUIRE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expires = now + tonumber(ARGV[2])
local job = string.match(ARGV[1], '^[^:]*')
for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local jobs, n = {}, 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
    local j = string.match(m, '^[^:]*')
    if not jobs[j] then jobs[j], n = true, n + 1 end
  end
  if not jobs[job] and n >= tonumber(ARGV[2 + i]) then return i end
end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], expires, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return 0
"""
# Renew only what is still held: 1 renewed, 0 lost (it expired and may be someone else's).
_RENEW = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[2]) * 2)
end
return 1
"""
# Drop every other member of the attempt's job (ARGV[1] is the attempt's own member): called
# once the attempt holds the job in the database, so they are dead or failed attempts.
# Returns how many such members there were.
_ADOPT = """
local job = string.match(ARGV[1], '^[^:]*')
local gone, n = {}, 0
for i = 1, 2 do
  for _, m in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
    if m ~= ARGV[1] and string.match(m, '^[^:]*') == job then
      redis.call('ZREM', KEYS[i], m)
      if not gone[m] then gone[m], n = true, n + 1 end
    end
  end
end
return n
"""
# Token bucket: `burst` tokens, refilled at `rate` per second. Returns the seconds to wait
# (as a string: Lua numbers reach Redis as integers), "0" when a token was taken.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or burst)
local last = tonumber(redis.call('HGET', KEYS[1], 'at') or now)
tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""


def new_member(job_id: int) -> str:
    """A slot member unique to one attempt at the job, so that attempt's renew and release
    never touch another attempt's slot (a duplicate message may run alongside)."""
    return f"{int(job_id)}:{secrets.token_hex(8)}"


def _job_of(member: str | bytes) -> str:
    text = member.decode() if isinstance(member, bytes) else member
    return text.split(":", 1)[0]


def _installation_key(installation_id: int | None, repo: str) -> str:
    if installation_id is not None:
        return f"installation:{int(installation_id)}"
    return f"owner:{repo.split('/', 1)[0].lower()}"


class JobSlots:
    """At most `per_installation` running jobs per installation and `per_repo` per repository.
    A slot is a lease that must be renewed within `ttl` seconds."""

    def __init__(
        self,
        redis: Redis,
        per_installation: int,
        per_repo: int,
        *,
        ttl: float = SLOT_TTL,
        prefix: str = "onloop",
    ) -> None:
        self.redis, self.per_installation, self.per_repo = redis, per_installation, per_repo
        self.ttl_ms = int(ttl * 1000)
        self.prefix = prefix
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._adopt = redis.register_script(_ADOPT)

    def keys(self, repo: str, installation_id: int | None) -> list[str]:
        return [
            f"{self.prefix}:slots:{_installation_key(installation_id, repo)}",
            f"{self.prefix}:slots:repo:{repo.lower()}",
        ]

    def acquire(self, member: str, repo: str, installation_id: int | None) -> bool:
        """Take a slot for the attempt `member` (see `new_member`), or renew the one it holds;
        False when either cap is full."""
        return self.why_not(member, repo, installation_id) is None

    def why_not(self, member: str, repo: str, installation_id: int | None) -> str | None:
        """Like acquire; None when the slot is the attempt's, else "installation" or "repo"."""
        args: list[str | int] = [member, self.ttl_ms, self.per_installation, self.per_repo]
        code = int(self._acquire(keys=self.keys(repo, installation_id), args=args))
        return {0: None, 1: "installation", 2: "repo"}[code]

    def renew(self, member: str, repo: str, installation_id: int | None) -> bool:
        """Extend the attempt's lease; False when it had already expired."""
        keys = self.keys(repo, installation_id)
        return bool(self._renew(keys=keys, args=[member, self.ttl_ms]))

    def release(self, member: str, repo: str, installation_id: int | None) -> None:
        """Free the attempt's own slot; other attempts at the same job keep theirs."""
        pipe = self.redis.pipeline()
        for key in self.keys(repo, installation_id):
            pipe.zrem(key, member)
        pipe.execute()

    def adopt(self, member: str, repo: str, installation_id: int | None) -> int:
        """Drop the slots of the job's other attempts, leaving `member`'s: only once this
        attempt holds the job in the database. Returns how many were dropped."""
        return int(self._adopt(keys=self.keys(repo, installation_id), args=[member]))

    def running(self, repo: str, installation_id: int | None) -> tuple[int, int]:
        """(jobs holding a slot in the installation, in the repository), expired ones aside;
        a job with several attempts' slots counts once, as in the caps."""
        now_ms = int(self.redis.time()[0]) * 1000
        pipe = self.redis.pipeline()
        for key in self.keys(repo, installation_id):
            pipe.zrangebyscore(key, now_ms, "+inf")
        inst, rep = pipe.execute()
        return len({_job_of(m) for m in inst}), len({_job_of(m) for m in rep})


class StartBucket:
    """A token bucket of job starts: `rate_per_minute` on average, `burst` at once."""

    def __init__(
        self, redis: Redis, rate_per_minute: float, burst: int, *, prefix: str = "onloop"
    ) -> None:
        self.rate = rate_per_minute / 60.0
        self.burst = burst
        self.prefix = prefix
        self._take = redis.register_script(_TAKE)

    def take(self, key: str) -> float:
        """Take a token from `key`'s bucket: 0.0, or the seconds until one is there."""
        wait = self._take(keys=[f"{self.prefix}:starts:{key}"], args=[self.rate, self.burst])
        return float(wait.decode() if isinstance(wait, bytes) else wait)


@dataclass(frozen=True)
class Admission:
    """Whether a job may start now; when not, why and when to ask again."""

    admitted: bool
    reason: str = "ok"  # "ok", "installation", "repo" (a cap is full) or "rate"
    retry_after: float = 0.0
    member: str = ""  # this attempt's slot (see `new_member`), held only when admitted


class Limiter:
    """Slots and the start bucket together, as the job runner uses them."""

    def __init__(self, slots: JobSlots, bucket: StartBucket) -> None:
        self.slots, self.bucket = slots, bucket

    @classmethod
    def from_settings(
        cls, settings: Settings, redis: Redis, *, prefix: str = "onloop", ttl: float = SLOT_TTL
    ) -> Limiter:
        slots = JobSlots(
            redis,
            settings.max_jobs_per_installation,
            settings.max_jobs_per_repo,
            ttl=ttl,
            prefix=prefix,
        )
        bucket = StartBucket(
            redis, settings.job_starts_per_minute, settings.job_start_burst, prefix=prefix
        )
        return cls(slots, bucket)

    def admit(self, job_id: int, repo: str, installation_id: int | None) -> Admission:
        """Take a slot and a start token for a new attempt at the job, or neither. The caller
        must `release` an admitted attempt's `member` (or use `slot()`, which does both and
        renews the lease meanwhile)."""
        member = new_member(job_id)
        full = self.slots.why_not(member, repo, installation_id)
        if full is not None:
            retry = FULL_RETRY + random.uniform(0, FULL_RETRY)  # noqa: S311
            return Admission(False, full, retry, member)
        wait = self.bucket.take(_installation_key(installation_id, repo))
        if wait > 0:
            self.slots.release(member, repo, installation_id)
            return Admission(False, "rate", wait, member)
        return Admission(True, member=member)

    def release(self, member: str, repo: str, installation_id: int | None) -> None:
        self.slots.release(member, repo, installation_id)

    def adopt(self, member: str, repo: str, installation_id: int | None) -> int:
        """After the attempt `member` claimed its job in the database: drop the job's other
        slots (a dead worker's, which would otherwise linger up to the TTL)."""
        return self.slots.adopt(member, repo, installation_id)

    @contextmanager
    def slot(self, job_id: int, repo: str, installation_id: int | None) -> Iterator[Admission]:
        """`admit`, then, when admitted, renew the slot while the block runs and free it after.
        A job not admitted stays queued: publish it again after `retry_after` seconds."""
        admission = self.admit(job_id, repo, installation_id)
        if not admission.admitted:
            yield admission
            return
        member = admission.member
        stop = threading.Event()
        interval = self.slots.ttl_ms / 3000

        def renew() -> None:
            while not stop.wait(interval):
                try:
                    if self.slots.renew(member, repo, installation_id):
                        continue
                    # Lost (Redis was away, or the worker stalled, past the TTL) while the job
                    # still runs: count it again, so the caps keep holding for the jobs after.
                    if not self.slots.acquire(member, repo, installation_id):
                        log.warning("job %s runs without its slot: the caps are full", job_id)
                except Exception:  # noqa: S112 - a Redis blip: the next beat tries again
                    continue

        beat = threading.Thread(target=renew, name=f"slot-{job_id}", daemon=True)
        beat.start()
        try:
            yield admission
        finally:
            stop.set()
            beat.join(timeout=5)
            self.slots.release(member, repo, installation_id)


def queue_position(db: Database, job: Job) -> int:
    """The job's place among the queued jobs that share its installation (or, without one,
    its repository), oldest first: 1 means next."""
    scope = (
        Job.installation_id == job.installation_id
        if job.installation_id is not None
        else Job.repo == job.repo
    )
    with db.read() as s:
        ahead = s.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.state == JobState.QUEUED, Job.id < job.id, scope)
        )
    return int(ahead or 0) + 1
