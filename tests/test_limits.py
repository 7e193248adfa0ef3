"""Concurrency caps and the start bucket on a real Redis: caps hold, nothing is lost."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from app.db import Database
from app.models import Job, JobState
from app.settings import Settings
from tasks.lease import claim, finish
from tasks.limits import JobSlots, Limiter, StartBucket, queue_position
from tests.redis_server import RedisServer

REPO = "octo/hello"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[redis.Redis]:
    server = RedisServer(tmp_path).start()
    conn = redis.Redis.from_url(server.url)
    yield conn
    conn.close()
    server.stop()


def limiter(client: redis.Redis, **overrides: object) -> Limiter:
    values: dict[str, object] = {
        "max_jobs_per_installation": 10,
        "max_jobs_per_repo": 3,
        "job_starts_per_minute": 6000,
        "job_start_burst": 50,
    }
    values.update(overrides)
    settings = Settings(_env_file=None, **values)  # type: ignore[arg-type]
    return Limiter.from_settings(settings, client, prefix=f"t-{uuid.uuid4().hex[:6]}")


def test_slots_cap_per_repo_and_per_installation(client: redis.Redis) -> None:
    slots = JobSlots(client, per_installation=3, per_repo=2, prefix="t1")
    assert slots.why_not(1, "o/a", 5) is None
    assert slots.why_not(2, "o/a", 5) is None
    assert slots.why_not(3, "o/a", 5) == "repo"
    assert slots.why_not(3, "o/b", 5) is None
    assert slots.why_not(4, "o/c", 5) == "installation"
    assert slots.why_not(4, "o/c", 6) is None  # another installation
    assert slots.acquire(1, "o/a", 5)  # holding already: renewed, not counted twice
    assert slots.running("o/a", 5) == (3, 2)
    slots.release(1, "o/a", 5)
    assert slots.acquire(5, "o/a", 5)


def test_a_dead_workers_slot_frees_itself(client: redis.Redis) -> None:
    slots = JobSlots(client, per_installation=1, per_repo=1, ttl=0.5, prefix="t2")
    assert slots.acquire(1, REPO, 1)  # and its worker dies: never renewed, never released
    assert not slots.acquire(2, REPO, 1)
    time.sleep(0.7)
    assert not slots.renew(1, REPO, 1)
    assert slots.acquire(2, REPO, 1)


def test_the_start_bucket_allows_a_burst_then_the_rate(client: redis.Redis) -> None:
    bucket = StartBucket(client, rate_per_minute=60, burst=3, prefix="t3")
    assert [bucket.take("i:1") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = bucket.take("i:1")
    assert 0 < wait <= 1.0
    assert bucket.take("i:2") == 0.0  # buckets are per key


def test_over_the_rate_a_job_is_told_to_wait_and_keeps_no_slot(client: redis.Redis) -> None:
    lim = limiter(client, job_starts_per_minute=1, job_start_burst=1)
    assert lim.admit(1, REPO, 1).admitted
    refused = lim.admit(2, REPO, 1)
    assert (refused.admitted, refused.reason) == (False, "rate") and refused.retry_after > 0
    assert lim.slots.running(REPO, 1) == (1, 1)


def _queued_jobs(db: Database, repos: list[str], installation_id: int = 1) -> list[int]:
    with db.session() as s:
        jobs = [
            Job(kind="rebase_pr", repo=repo, installation_id=installation_id, requested_by="a")
            for repo in repos
        ]
        s.add_all(jobs)
        s.flush()
        return [j.id for j in jobs]


def _storm(
    db: Database, lim: Limiter, jobs: dict[int, str]
) -> tuple[Counter[str], int, Counter[str]]:
    """One thread per trigger, each running its job under the limiter as a worker would:
    retry until admitted, claim, work a little, finish. Returns the most jobs seen running
    at once per repository and in total, and why jobs had to wait (reason: count)."""
    lock = threading.Lock()
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    total = [0, 0]  # running, peak

    def worker(job_id: int, repo: str) -> None:
        while True:
            with lim.slot(job_id, repo, 1) as admission:
                if admission.admitted:
                    assert claim(db, job_id, f"w{job_id}", 60)
                    with lock:
                        running[repo] += 1
                        total[0] += 1
                        peak[repo] = max(peak[repo], running[repo])
                        total[1] = max(total[1], total[0])
                    time.sleep(0.02)
                    with lock:
                        running[repo] -= 1
                        total[0] -= 1
                    assert finish(db, job_id, f"w{job_id}", JobState.SUCCEEDED, {})
                    return
            with lock:
                waits[admission.reason] += 1
            time.sleep(min(admission.retry_after, 0.05))

    threads = [threading.Thread(target=worker, args=item) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not any(t.is_alive() for t in threads)
    return peak, total[1], waits


@pytest.mark.slow
def test_fifty_triggers_on_one_repository(client: redis.Redis, db: Database) -> None:
    lim = limiter(client, max_jobs_per_repo=3, job_starts_per_minute=1200, job_start_burst=5)
    ids = _queued_jobs(db, [REPO] * 50)
    peak, _, waits = _storm(db, lim, dict.fromkeys(ids, REPO))
    assert peak[REPO] <= 3
    assert waits["repo"] > 0 and waits["rate"] > 0  # both limits held jobs back
    with db.sessions() as s:
        rows = list(s.execute(select(Job.state, Job.attempts).where(Job.id.in_(ids))))
    assert len(rows) == 50
    assert all(state == JobState.SUCCEEDED and attempts == 1 for state, attempts in rows)
    assert lim.slots.running(REPO, 1) == (0, 0)


@pytest.mark.slow
def test_the_installation_cap_holds_across_repositories(client: redis.Redis, db: Database) -> None:
    lim = limiter(client, max_jobs_per_installation=4, max_jobs_per_repo=3)
    repos = [f"octo/r{n % 5}" for n in range(40)]
    ids = _queued_jobs(db, repos)
    peak, total_peak, waits = _storm(db, lim, dict(zip(ids, repos, strict=True)))
    assert total_peak <= 4 and max(peak.values()) <= 3
    assert waits["installation"] > 0
    with db.sessions() as s:
        states = list(s.scalars(select(Job.state).where(Job.id.in_(ids))))
    assert states == [JobState.SUCCEEDED] * 40


def test_queue_position(db: Database) -> None:
    first, second, third = _queued_jobs(db, [REPO, "octo/other", REPO])
    (elsewhere,) = _queued_jobs(db, [REPO], installation_id=2)
    with db.sessions() as s:
        jobs = {j.id: j for j in s.scalars(select(Job))}
    assert [queue_position(db, jobs[i]) for i in (first, second, third)] == [1, 2, 3]
    assert queue_position(db, jobs[elsewhere]) == 1
    assert claim(db, first, "w", 60)
    assert queue_position(db, jobs[third]) == 2


def test_slots_on_the_shared_redis(settings: Settings) -> None:
    assert settings.redis_url
    conn = redis.Redis.from_url(settings.redis_url)
    slots = JobSlots(conn, 1, 1, prefix=f"t-{uuid.uuid4().hex}")
    assert slots.acquire(1, REPO, 1) and not slots.acquire(2, REPO, 1)
    slots.release(1, REPO, 1)
    conn.close()
