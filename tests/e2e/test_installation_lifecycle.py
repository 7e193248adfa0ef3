"""An uninstalled or suspended App: its live jobs are cancelled, its deliveries make no jobs
until it is back, and a job whose installation is gone on GitHub fails saying so."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app.core.settings import Settings
from app.intake.decide import Ignored
from app.store.db import Database
from app.store.models import Delivery, Job, JobState
from app.web import create_app
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.jobs import long_step, quiet_runner
from tests.doubles.payloads import pr_comment
from tests.doubles.webhooks import deliver, load_fixture
from tests.doubles.worker_proc import wait_until

REPO = "octo/hello"
OTHER = "elsewhere/app"
GONE = "onloop's installation on octo is gone or suspended; reinstall or unsuspend the App"


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> Iterator[tuple[GitHubDouble, Settings, Database, Any, int]]:
    redis_url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    settings = settings_for(github_double, tmp_path, database_url=database_url, redis_url=redis_url)
    github_double.create_repo(REPO, files={"README.md": "hello\n"})
    github_double.create_repo(OTHER, files={"README.md": "elsewhere\n"})
    inst = github_double.installation_for(github_double.repo(REPO))
    assert inst is not None
    db = Database(database_url)
    client = create_app(settings, db=db).test_client()
    assert deliver(client, "installation", installation(inst.id, "created")).status_code == 202
    yield github_double, settings, db, client, inst.id
    db.dispose()


def installation(installation_id: int, action: str) -> dict[str, Any]:
    """An `installation` webhook for the App on `octo` (deleted, suspend, unsuspend...)."""
    data = load_fixture("installation.deleted")
    data["action"] = action
    data["installation"]["id"] = installation_id
    data["installation"]["account"]["login"] = "octo"
    return data


def comment(client: Any, double: GitHubDouble, number: int, repo: str = REPO) -> Any:
    return deliver(client, "issue_comment", pr_comment(double, repo, number, "/agent status"))


def jobs_by_id(db: Database) -> dict[int, Job]:
    with db.read() as s:
        return {j.id: j for j in s.scalars(select(Job))}


def set_state(db: Database, job_id: int, state: str) -> None:
    with db.transaction() as s:
        s.execute(update(Job).where(Job.id == job_id).values(state=state))


def outcome(db: Database, guid: str) -> str | None:
    with db.read() as s:
        return s.scalar(select(Delivery.outcome).where(Delivery.guid == guid))


@pytest.mark.parametrize(
    ("action", "what", "ignored", "back"),
    [
        ("deleted", "uninstalled", Ignored.UNINSTALLED, "created"),
        ("suspend", "suspended", Ignored.SUSPENDED, "unsuspend"),
    ],
)
def test_deleted_or_suspended_cancels_live_jobs_and_takes_no_new_ones(
    world: Any, action: str, what: str, ignored: str, back: str
) -> None:
    double, _settings, db, client, inst_id = world
    queued, waiting, running, done = (
        comment(client, double, n).get_json()["jobs"][0] for n in (1, 2, 3, 4)
    )
    elsewhere = comment(client, double, 1, repo=OTHER).get_json()["jobs"][0]
    set_state(db, waiting, JobState.WAITING_FOR_AUTHORIZATION)
    set_state(db, running, JobState.RUNNING)
    set_state(db, done, JobState.SUCCEEDED)

    response = deliver(client, "installation", installation(inst_id, action))
    assert response.status_code == 202
    assert response.get_json()["cancelled"] == [queued, waiting, running]
    jobs = jobs_by_id(db)
    for job_id in (queued, waiting, running):
        assert (jobs[job_id].state, jobs[job_id].live_key) == (JobState.CANCELLED, None)
        assert jobs[job_id].result == {"reason": f"onloop was {what} on octo"}
        assert jobs[job_id].finished_at is not None
    assert jobs[done].state == JobState.SUCCEEDED
    assert jobs[elsewhere].state == JobState.QUEUED  # another account's installation

    data = pr_comment(double, REPO, 5, "/agent status")
    data["installation"] = {"id": inst_id}  # the double no longer names it for the repo
    later = deliver(client, "issue_comment", data, guid="after")
    assert later.status_code == 204
    assert outcome(db, "after") == ignored
    assert set(jobs_by_id(db)) == {queued, waiting, running, done, elsewhere}

    assert deliver(client, "installation", installation(inst_id, back)).status_code == 202
    again = deliver(client, "issue_comment", data, guid="back")
    assert again.status_code == 202 and outcome(db, "back") == "status"
    (new_job,) = again.get_json()["jobs"]
    assert jobs_by_id(db)[new_job].state == JobState.QUEUED


@pytest.mark.timeout(120)
def test_a_running_jobs_sandbox_stops_when_the_app_is_uninstalled(world: Any) -> None:
    _double, settings, db, client, inst_id = world
    stopped = threading.Event()
    jobs = quiet_runner(settings, db, {"rebase_pr": long_step(stopped)})
    with db.transaction() as s:
        job = Job(kind="rebase_pr", repo=REPO, installation_id=inst_id, number=1, requested_by="a")
        s.add(job)
        s.flush()
        job_id = job.id
    outcomes: list[str] = []
    worker = threading.Thread(target=lambda: outcomes.append(jobs.run(job_id)))
    worker.start()
    try:
        wait_until(lambda: jobs_by_id(db)[job_id].state == JobState.RUNNING, 60, "the job")
        response = deliver(client, "installation", installation(inst_id, "deleted"))
        assert response.get_json()["cancelled"] == [job_id]
    finally:
        worker.join(60)
    assert stopped.is_set() and outcomes == ["cancelled"]
    final = jobs_by_id(db)[job_id]
    assert final.state == JobState.CANCELLED
    assert final.result == {"reason": "onloop was uninstalled on octo"}


@pytest.mark.parametrize("how", ["uninstall", "suspend"])
def test_a_job_whose_installation_is_gone_fails_saying_so(world: Any, how: str) -> None:
    double, settings, db, client, inst_id = world
    (job_id,) = comment(client, double, 1).get_json()["jobs"]
    getattr(double, how)(inst_id)  # on GitHub, before its webhook reached onloop
    assert Worker(settings, db=db).jobs.run(job_id) == JobState.FAILED
    job = jobs_by_id(db)[job_id]
    assert job.state == JobState.FAILED and job.result["error"] == GONE
    assert job.result["github_status"] == (404 if how == "uninstall" else 403)
