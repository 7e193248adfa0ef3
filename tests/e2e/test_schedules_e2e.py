"""A `fixers` schedule end to end on the GitHub double: beat's tick makes the job, a real
worker runs the fixers in the (bubblewrap) sandbox and opens the owner's pull request with
the owner's own token; fixers that change nothing record "nothing to change"."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState
from app.store.schedule_slots import ScheduleOutcome
from tasks.blueprints.fixers import NOTHING, WAITING
from tasks.queue.schedules import Fired
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.redis_server import RedisServer
from tests.doubles.schedules import REPO, Beat, approve, installed_repo, schedule_file, sign_in

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="the local sandbox needs bwrap")
FIXER = "checks:\n  fix: [\"sed -i 's/[[:space:]]*$//' README.md\"]\n"
SLOT = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


@pytest.fixture
def settings(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[Settings]:
    redis = RedisServer(tmp_path).start()
    yield settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        sandbox_backend="local",
    )
    redis.stop()


def ticked(settings: Settings, now: datetime) -> list[Fired]:
    beat = Beat(settings)
    try:
        return beat.tick(now)
    finally:
        beat.close()


def fire(settings: Settings, now: datetime) -> int:
    """One beat tick at `now` whose slot makes one job; its id."""
    (fired,) = ticked(settings, now)
    assert fired.outcome == ScheduleOutcome.QUEUED, fired
    (job_id,) = fired.job_ids
    return job_id


def run(settings: Settings, db: Database, job_id: int) -> Job:
    worker = Worker(settings, db=Database(settings.database_url))
    try:
        assert worker.jobs.run(job_id) in (JobState.SUCCEEDED, JobState.FAILED)
    finally:
        worker.close()
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job


def first_slot(double: GitHubDouble, db: Database, settings: Settings, readme: str) -> Job:
    """alice's `fixers` schedule on a README of `readme`: armed, then its first slot's job run."""
    config = schedule_file("fixers", "alice", extra=FIXER)
    installed_repo(double, db, {"README.md": readme, ".github/onloop.yml": config})
    sign_in(double, db, "alice")
    approve(double, db, config)
    assert ticked(settings, SLOT - timedelta(hours=1))[0].outcome == ScheduleOutcome.ARMED
    job = run(settings, db, fire(settings, SLOT))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps)
    return job


def test_a_fixers_schedule_opens_its_owners_pull_request(
    github_double: GitHubDouble, db: Database, settings: Settings
) -> None:
    job = first_slot(github_double, db, settings, "widgets   \n")
    number = job.result["pr"]
    pr = github_double.issue(REPO, number)
    assert pr.pull is not None and pr.user == "alice"
    assert pr.pull.head_ref == f"onloop/schedule-nightly-{job.id}"
    (opened,) = [c for c in github_double.calls("POST", f"/repos/{REPO}/pulls") if c.status == 201]
    assert opened.identity.kind == "user" and opened.identity.login == "alice"  # her token
    shown = ["git", "show", f"{pr.pull.head_ref}:README.md"]
    fixed = subprocess.run(shown, cwd=github_double.git_dir(REPO), capture_output=True, text=True)
    assert fixed.stdout == "widgets\n"  # the fixer's change, on the pull request's branch

    # The next slot waits for that pull request rather than opening another beside it.
    again = run(settings, db, fire(settings, SLOT + timedelta(days=1)))
    assert again.state == JobState.SUCCEEDED
    assert (again.result["outcome"], again.result["pr"]) == (WAITING, number)


def test_fixers_that_change_nothing_are_recorded_as_such(
    github_double: GitHubDouble, db: Database, settings: Settings
) -> None:
    job = first_slot(github_double, db, settings, "widgets\n")
    assert job.result["outcome"] == NOTHING
    assert not [i for i in github_double.repo(REPO).issues.values() if i.pull is not None]
