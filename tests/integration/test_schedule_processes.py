"""Two beat processes (each its own interpreter, database engine, GitHub client and cache)
tick over one slot at the same moment: the slot fires once, as its owner."""

from __future__ import annotations

import multiprocessing
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.core.kinds import Kind
from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job
from app.store.schedule_slots import ScheduleOutcome
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.schedules import Beat, approve, installed_repo, schedule_file, sign_in

BEFORE = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
SLOT = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)


def beat_process(settings: Settings, now: datetime, start: Any, out: Any) -> None:
    """A beat of its own in a fresh interpreter: wait for the other, tick once, say what fired."""
    beat = Beat(settings)
    try:
        start.wait(60)
        out.put([(f.outcome.value, f.job_ids) for f in beat.tick(now)])
    except BaseException as exc:  # said in the test's process
        out.put(repr(exc))
    finally:
        beat.close()


def two_beats(settings: Settings, now: datetime) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")  # nothing of the test's process is shared
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=beat_process, args=(settings, now, start, out)) for _ in "ab"]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    return results


@pytest.fixture
def settings(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Settings:
    redis_url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    return settings_for(github_double, tmp_path, database_url=database_url, redis_url=redis_url)


def test_two_beat_processes_fire_a_slot_once_as_its_owner(
    github_double: GitHubDouble, db: Database, settings: Settings
) -> None:
    files = {"README.md": "widgets\n", ".github/onloop.yml": schedule_file("fixers", "alice")}
    installed_repo(github_double, db, files)
    sign_in(github_double, db, "alice")
    approve(github_double, db, files[".github/onloop.yml"])

    armed = two_beats(settings, BEFORE)
    assert sorted(map(str, armed)) == sorted(map(str, [[("armed", ())], []])), armed

    fired = two_beats(settings, SLOT + timedelta(seconds=20))
    assert all(isinstance(result, list) for result in fired), fired
    queued = [f for result in fired for f in result]
    assert [outcome for outcome, _ in queued] == [ScheduleOutcome.QUEUED.value], fired
    with db.read() as s:
        (job,) = s.scalars(select(Job)).all()
    assert queued[0][1] == (job.id,)
    assert (job.kind, job.requested_by) == (Kind.RUN_FIXERS, "alice")
    assert job.requested_by_id == github_double.user("alice").id
