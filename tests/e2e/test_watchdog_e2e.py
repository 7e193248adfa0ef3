"""Whatever dies mid-job, the job ends within its time limit plus ONLOOP_WATCHDOG_GRACE and
GitHub shows it: a real `onloop worker` SIGKILLed (the watchdog of `onloop beat` concludes
it), its Redis stopped (its own time limit does), or both (the watchdog, without Redis).
Docker, a private Redis and the GitHub double; the job holds in its agent step, a command
that would sleep for ten minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from app.store.db import Database
from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.checks import CheckRun
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import issue_labeled
from tests.doubles.redis_server import RedisServer
from tests.doubles.worker_proc import ROOT, settings_env, wait_until
from tests.e2e.world import REPO, World, remove_snapshots

pytestmark = [pytest.mark.docker, pytest.mark.slow]
LIMIT, GRACE, INTERVAL = 45, 5, 1  # seconds: the bound is LIMIT + GRACE from the job's start
SLACK = 30  # a sweep's interval, the GitHub calls and a loaded machine


class Outage(World):
    """The world of tests/e2e/world.py, with its Redis in the test's hands."""

    redis: RedisServer


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[Outage]:
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        feedback_interval=0,
        sandbox_pool_size=0,
        agent="command",
        agent_command="sleep 600",
        job_time_limit=LIMIT,
        watchdog_grace=GRACE,
        watchdog_interval=INTERVAL,
    )
    github_double.create_repo(REPO, files={"README.md": "teh widgets\n"})
    github_double.set_permission(REPO, "carol", "maintain")
    db = Database(database_url)
    world = Outage(github_double, settings, db, tmp_path)
    world.redis = redis
    try:
        yield world
    finally:
        world.worker.stop()
        remove_containers(world)  # a killed worker's sandbox is left running
        db.dispose()
        redis.stop()
        remove_snapshots(tmp_path / "work" / "snapshots")
    assert not github_double.merges and not github_double.approvals


def remove_containers(world: World) -> None:
    """This test's own sandbox containers (found by their workspace under its directory)."""
    client = docker.from_env()
    try:
        for cid in world.containers():
            try:
                client.containers.get(cid).remove(force=True)
            except docker.errors.NotFound:
                pass
    finally:
        client.close()


def working_fix(world: World) -> tuple[int, int, CheckRun]:
    """carol labels an issue `agent:fix`; once its agent step runs, with the status comment
    and check run saying so: the job, the issue and the check run."""
    world.authorize("carol")
    issue = world.double.create_issue(REPO, "Typo in README", "It says teh.", user="alice")
    (job_id,) = world.deliver(
        "issues", issue_labeled(world.double, REPO, issue.number, user="carol")
    )
    world.wait_step(job_id, "agent")
    tip = world.double.branch_sha(REPO, "main") or ""  # what a fix of an issue works on
    (run,) = wait_until(lambda: world.double.checks.for_commit(REPO, tip), 60, "the check run")
    assert run.status == "in_progress"
    wait_until(lambda: "**Working**" in status_of(world, job_id, issue.number), 60, "Working")
    return job_id, issue.number, run


def status_of(world: World, job_id: int, number: int) -> str:
    marker = f"<!-- onloop:job-{job_id}-status -->"
    found = [c.body for c in world.bot_comments(number) if marker in c.body]
    return found[0] if found else ""


def concluded(world: World, job_id: int, number: int, sha: str) -> tuple[CheckRun, str]:
    """Within the bound: the check run completed and the status comment final."""

    def final() -> tuple[CheckRun, str] | None:
        (run,) = world.double.checks.for_commit(REPO, sha)
        status = status_of(world, job_id, number)
        if run.status == "completed" and status and "**Working**" not in status:
            return run, status
        return None

    found: tuple[CheckRun, str] = wait_until(final, LIMIT + GRACE + SLACK, "the final status")
    return found


def assert_abandoned(world: World, job_id: int, run: CheckRun, status: str) -> None:
    assert run.conclusion == "timed_out"
    assert "**Failed**" in status and "still not finished" in status  # what happened
    assert "Ask again with" in status  # what the person can do
    job = world.job(job_id)
    assert job.state == JobState.FAILED and job.result["outcome"] == "abandoned"
    assert job.live_key is None
    assert not world.double.pushes  # nothing of the job's reached GitHub


def start_beat(world: World, log: Path) -> subprocess.Popen[bytes]:
    """`onloop beat`, with its watchdog, as a real process of its own."""
    env = settings_env(world.settings, ONLOOP_GITHUB_PACING="false", ONLOOP_LOG_JSON="false")
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "beat"],
            cwd=world.root,
            env=env | {"PYTHONPATH": str(ROOT)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_a_job_whose_worker_is_killed_is_concluded_by_the_watchdog(world: Outage) -> None:
    job_id, number, run = working_fix(world)
    world.worker.kill()  # SIGKILL mid-job: no cleanup, no last word
    beat = start_beat(world, world.root / "beat.log")
    try:
        run, status = concluded(world, job_id, number, run.head_sha)
    finally:
        os.killpg(beat.pid, signal.SIGTERM)
        beat.wait(timeout=30)
    assert_abandoned(world, job_id, run, status)
    assert len(world.bot_comments(number)) == 1  # the status comment, edited in place


def test_a_job_whose_redis_stops_ends_within_the_bound(world: Outage) -> None:
    """The worker lives on without Redis: the job's own time limit stops it, and its
    status comment and check run say so (through GitHub and the database alone)."""
    job_id, number, run = working_fix(world)
    world.redis.stop()  # mid-job, for good
    run, status = concluded(world, job_id, number, run.head_sha)
    assert (run.conclusion, world.job(job_id).state) == ("failure", JobState.FAILED)
    assert "time limit" in status and "ask again" in status
    assert len(world.bot_comments(number)) == 1 and not world.double.pushes


def test_a_job_whose_redis_stops_and_then_its_worker_dies_is_concluded(world: Outage) -> None:
    """Redis down, then the worker killed: `onloop beat`'s watchdog concludes the job with
    the database and GitHub alone, Redis still down."""
    job_id, number, run = working_fix(world)
    world.redis.stop()
    world.worker.kill()
    beat = start_beat(world, world.root / "beat.log")
    try:
        run, status = concluded(world, job_id, number, run.head_sha)
    finally:
        os.killpg(beat.pid, signal.SIGTERM)
        beat.wait(timeout=30)
    assert_abandoned(world, job_id, run, status)
    assert len(world.bot_comments(number)) == 1
