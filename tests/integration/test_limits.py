"""Concurrency caps and the start bucket on a real Redis: caps hold, nothing is lost."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState, Outbox
from tasks.runner.lease import claim, finish
from tasks.runner.limits import JobSlots, Limiter, StartBucket, new_member, queue_position
from tests.doubles.jobs import quiet_runner
from tests.doubles.redis_server import RedisServer

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
    one, two, three, four, five = (new_member(n) for n in range(1, 6))
    assert slots.why_not(one, "o/a", 5) is None
    assert slots.why_not(two, "o/a", 5) is None
    assert slots.why_not(three, "o/a", 5) == "repo"
    assert slots.why_not(three, "o/b", 5) is None
    assert slots.why_not(four, "o/c", 5) == "installation"
    assert slots.why_not(four, "o/c", 6) is None  # another installation
    assert slots.acquire(one, "o/a", 5)  # holding already: renewed, not counted twice
    assert slots.acquire(new_member(1), "o/a", 5)  # another attempt at job 1: the same job
    assert slots.running("o/a", 5) == (3, 2)
    slots.release(one, "o/a", 5)
    assert slots.running("o/a", 5) == (3, 2)  # job 1's other attempt still holds its slot
    assert slots.why_not(five, "o/a", 5) == "installation"
    slots.release(two, "o/a", 5)
    assert slots.acquire(five, "o/a", 5)


def test_a_dead_workers_slot_frees_itself(client: redis.Redis) -> None:
    slots = JobSlots(client, per_installation=1, per_repo=1, ttl=0.5, prefix="t2")
    dead = new_member(1)
    assert slots.acquire(dead, REPO, 1)  # and its worker dies: never renewed, never released
    assert not slots.acquire(new_member(2), REPO, 1)
    time.sleep(0.7)
    assert not slots.renew(dead, REPO, 1)
    assert slots.acquire(new_member(2), REPO, 1)


def test_a_duplicate_attempt_gives_up_without_freeing_the_running_ones_slot(
    client: redis.Redis,
) -> None:
    lim = limiter(client, max_jobs_per_repo=1)
    first = lim.admit(1, REPO, 1)  # two messages for job 1: this one claims and runs it
    second = lim.admit(1, REPO, 1)  # the duplicate, admitted on job 1's slot
    assert first.admitted and second.admitted and first.member != second.member
    assert lim.slots.running(REPO, 1) == (1, 1)
    lim.release(second.member, REPO, 1)  # its claim failed
    assert lim.slots.running(REPO, 1) == (1, 1)
    assert lim.admit(2, REPO, 1).reason == "repo"  # the cap still holds for job 1's run
    assert lim.slots.renew(first.member, REPO, 1)
    lim.release(first.member, REPO, 1)
    assert lim.admit(2, REPO, 1).admitted


def test_a_duplicate_slot_context_leaves_the_running_attempts_slot(client: redis.Redis) -> None:
    lim = limiter(client, max_jobs_per_repo=1)
    with lim.slot(7, REPO, 1) as running:
        assert running.admitted
        with lim.slot(7, REPO, 1) as duplicate:
            assert duplicate.admitted  # it would fail its claim and leave
        assert lim.slots.running(REPO, 1) == (1, 1)
        assert not lim.admit(8, REPO, 1).admitted
    assert lim.slots.running(REPO, 1) == (0, 0)


def test_a_retry_adopts_its_dead_attempts_slot(client: redis.Redis) -> None:
    lim = limiter(client, max_jobs_per_repo=1)
    dead = lim.admit(3, REPO, 1)  # its worker died: never renewed, never released
    retry = lim.admit(3, REPO, 1)  # the job requeued before the dead slot expired
    assert dead.admitted and retry.admitted
    assert lim.slots.running(REPO, 1) == (1, 1)
    assert lim.adopt(retry.member, REPO, 1) == 1  # after its claim: the dead slot goes
    assert lim.adopt(retry.member, REPO, 1) == 0
    assert lim.slots.running(REPO, 1) == (1, 1)
    assert not lim.slots.renew(dead.member, REPO, 1)
    assert lim.slots.renew(retry.member, REPO, 1)
    lim.release(retry.member, REPO, 1)  # the retry finished: nothing of job 3 lingers
    assert lim.slots.running(REPO, 1) == (0, 0)
    assert lim.admit(4, REPO, 1).admitted


def test_adopting_leaves_other_jobs_alone(client: redis.Redis) -> None:
    slots = JobSlots(client, per_installation=5, per_repo=5, prefix=f"t-{uuid.uuid4().hex[:6]}")
    mine, stale, neighbour = new_member(1), new_member(1), new_member(11)
    for member in (stale, neighbour, mine):
        assert slots.acquire(member, REPO, 1)
    assert slots.adopt(mine, REPO, 1) == 1
    assert slots.running(REPO, 1) == (2, 2)
    for key in slots.keys(REPO, 1):
        assert {m.decode() for m in client.zrange(key, 0, -1)} == {mine, neighbour}


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
    with db.transaction() as s:
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
    with db.read() as s:
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
    with db.read() as s:
        states = list(s.scalars(select(Job.state).where(Job.id.in_(ids))))
    assert states == [JobState.SUCCEEDED] * 40


def test_queue_position(db: Database) -> None:
    first, second, third = _queued_jobs(db, [REPO, "octo/other", REPO])
    (elsewhere,) = _queued_jobs(db, [REPO], installation_id=2)
    with db.read() as s:
        jobs = {j.id: j for j in s.scalars(select(Job))}
    assert [queue_position(db, jobs[i]) for i in (first, second, third)] == [1, 2, 3]
    assert queue_position(db, jobs[elsewhere]) == 1
    assert claim(db, first, "w", 60)
    assert queue_position(db, jobs[third]) == 2


def test_slots_on_the_shared_redis(settings: Settings) -> None:
    assert settings.redis_url
    conn = redis.Redis.from_url(settings.redis_url)
    slots = JobSlots(conn, 1, 1, prefix=f"t-{uuid.uuid4().hex}")
    held = new_member(1)
    assert slots.acquire(held, REPO, 1) and not slots.acquire(new_member(2), REPO, 1)
    slots.release(held, REPO, 1)
    conn.close()


def test_run_job_adopts_a_dead_attempts_slot(settings: Settings, db: Database) -> None:
    assert settings.redis_url
    conn = redis.Redis.from_url(settings.redis_url)
    lim = limiter(conn, max_jobs_per_repo=1)
    (job_id,) = _queued_jobs(db, [REPO])
    dead = lim.admit(job_id, REPO, 1)  # a worker took the slot and died; the job was requeued
    seen: list[tuple[int, int]] = []

    def runner(ctx: object) -> dict[str, object]:
        seen.append(lim.slots.running(REPO, 1))
        assert not lim.slots.renew(dead.member, REPO, 1)  # adopted once claimed
        return {}

    jobs = quiet_runner(settings, db, {"rebase_pr": runner}, limiter=lim)
    assert jobs.run(job_id) == JobState.SUCCEEDED
    assert seen == [(1, 1)]
    assert lim.slots.running(REPO, 1) == (0, 0)  # nothing of the job lingers after it
    conn.close()


def test_a_duplicate_held_back_after_another_attempt_took_the_job_stays_quiet(
    settings: Settings, db: Database
) -> None:
    """A duplicate message finds the job queued, then the caps full: if another attempt
    claimed the job meanwhile, it neither requeues nor says the running job is queued."""
    assert settings.redis_url
    conn = redis.Redis.from_url(settings.redis_url)
    job_id, other = _queued_jobs(db, [REPO, REPO])

    class TakenMeanwhile(Limiter):
        def admit(self, job_id: int, repo: str, installation_id: int | None) -> Any:
            assert claim(db, job_id, "another-worker", 60)  # between the read and the caps
            return super().admit(job_id, repo, installation_id)

    base = limiter(conn, max_jobs_per_repo=1)
    lim = TakenMeanwhile(base.slots, base.bucket)
    jobs = quiet_runner(settings, db, {}, limiter=lim)
    held = base.admit(other, REPO, 1)  # the repository's one slot is taken
    requeued: list[float] = []
    try:
        assert jobs.run(job_id, requeued.append) == "skipped (no longer queued)"
    finally:
        base.release(held.member, REPO, 1)
        conn.close()
    assert requeued == []
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state == JobState.RUNNING and not job.result
        assert s.scalars(select(Outbox).where(Outbox.job_id == job_id)).all() == []
        said = s.scalars(select(AuditEntry).where(AuditEntry.job_id == job_id)).all()
        assert [e.action for e in said if e.action == "limits.wait"] == []


def test_a_running_job_that_lost_its_slot_takes_it_again(client: redis.Redis) -> None:
    """Redis away (or the worker stalled) past the TTL: the slot expired while the job ran.
    The next renewal counts the job again, so the cap holds for the jobs after it."""
    prefix = f"t-{uuid.uuid4().hex[:6]}"
    slots = JobSlots(client, per_installation=10, per_repo=1, ttl=0.6, prefix=prefix)
    lim = Limiter(slots, StartBucket(client, 6000, 50, prefix=prefix))
    with lim.slot(1, REPO, 1) as admission:
        assert admission.admitted
        for key in slots.keys(REPO, 1):  # as if it had expired
            client.zrem(key, admission.member)
        assert slots.running(REPO, 1) == (0, 0)
        deadline = time.monotonic() + 10
        while slots.running(REPO, 1) != (1, 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slots.running(REPO, 1) == (1, 1)
        assert not lim.admit(2, REPO, 1).admitted
    assert slots.running(REPO, 1) == (0, 0)
