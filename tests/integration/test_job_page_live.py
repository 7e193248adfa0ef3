"""A running job's page: its event stream (Redis pub/sub, as the worker publishes) and its
Cancel button, with the permission check of `/agent cancel` and a CSRF token."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select, update

from app.core.jobevents import JobEvent, JobEvents
from app.core.settings import Settings
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState, RepoConfigCache
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.integration.test_job_page import REPO, a_job, pages_redis_url, settings

__all__ = ["pages_redis_url", "settings"]  # the fixtures, shared with the page's tests


def events_of(body: Iterator[bytes]) -> Iterator[str]:
    """The event names of an SSE body as they come (comments and retry lines skipped)."""
    for chunk in body:
        for line in chunk.decode().splitlines():
            if line.startswith("event: "):
                yield line.removeprefix("event: ")


def data_of(chunk: bytes) -> str:
    return chunk.decode()


def signed_in_page(client: Any, double: GitHubDouble, login: str, job_id: int) -> str:
    page = open_signed_in(client, double, login, f"/jobs/{job_id}")
    assert page.status_code == 200, page.get_data(as_text=True)
    return str(page.get_data(as_text=True))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no Cancel form on the page"
    return found.group(1)


def set_state(db: Database, job_id: int, state: str) -> None:
    with db.transaction() as s:
        s.execute(update(Job).where(Job.id == job_id).values(state=state))


def state_of(db: Database, job_id: int) -> str | None:
    with db.read() as s:
        return s.scalar(select(Job.state).where(Job.id == job_id))


def test_the_event_stream_passes_on_the_worker_s_events_until_the_job_ends(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db, JobState.RUNNING)
    client = create_app(settings, db=db).test_client()
    html = signed_in_page(client, github_double, "alice", job_id)
    assert 'src="/pages/static/job.js"' in html and 'data-live="yes"' in html
    response = client.get(f"/jobs/{job_id}/events")
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    body = iter(response.response)
    assert data_of(next(body)).startswith("retry: ")  # subscribed from here on
    names = events_of(body)
    assert next(names) == "state"
    worker = JobEvents(settings.redis_url)  # as the worker's JobContext publishes
    worker.publish(job_id, JobEvent.OUTPUT)
    assert next(names) == "output"
    worker.publish(job_id, JobEvent.STEPS)
    assert next(names) == "steps"
    set_state(db, job_id, JobState.SUCCEEDED)
    worker.publish(job_id, JobEvent.STATE)
    assert next(names) == "state"
    assert list(names) == []  # the stream ends with the job
    response.close()


def test_the_event_stream_is_for_people_who_may_see_the_job(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db, JobState.RUNNING)
    client = create_app(settings, db=db).test_client()
    assert client.get(f"/jobs/{job_id}/events").status_code == 401
    open_signed_in(client, github_double, "mallory", f"/jobs/{job_id}")
    assert client.get(f"/jobs/{job_id}/events").status_code == 404


def test_the_person_who_asked_cancels_a_running_job(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    alice = github_double.user("alice").id
    job_id = a_job(db, JobState.RUNNING, by=("alice", alice))
    client = create_app(settings, db=db).test_client()
    token = csrf_of(signed_in_page(client, github_double, "alice", job_id))
    assert client.post(f"/jobs/{job_id}/cancel", data={"csrf": "forged"}).status_code == 400
    assert state_of(db, job_id) == JobState.RUNNING
    done = client.post(f"/jobs/{job_id}/cancel", data={"csrf": token})
    assert done.status_code == 303 and done.headers["Location"] == f"/jobs/{job_id}"
    with db.read() as s:
        job = s.get(Job, job_id)
        entries = list(s.scalars(select(AuditEntry).where(AuditEntry.job_id == job_id)))
    assert job is not None and job.state == JobState.CANCELLED
    assert job.result == {"reason": "cancelled by @alice"}
    assert [(e.action, e.actor) for e in entries if e.action == "job.cancel"] == [
        ("job.cancel", "alice")
    ]
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert 'name="csrf"' not in page and 'data-live="no"' in page
    again = client.post(f"/jobs/{job_id}/cancel", data={"csrf": token})
    assert again.status_code == 409


def test_someone_else_needs_the_trigger_permission_to_cancel(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    alice = github_double.user("alice").id
    github_double.set_permission(REPO, "bob", "write")
    github_double.set_permission(REPO, "carol", "triage")
    job_id = a_job(db, JobState.RUNNING, by=("alice", alice))
    carol = create_app(settings, db=db).test_client()
    token = csrf_of(signed_in_page(carol, github_double, "carol", job_id))
    refused = carol.post(f"/jobs/{job_id}/cancel", data={"csrf": token})
    assert refused.status_code == 403 and "(write)" in refused.get_data(as_text=True)
    assert state_of(db, job_id) == JobState.RUNNING
    bob = create_app(settings, db=db).test_client()
    token = csrf_of(signed_in_page(bob, github_double, "bob", job_id))
    assert bob.post(f"/jobs/{job_id}/cancel", data={"csrf": token}).status_code == 303
    assert state_of(db, job_id) == JobState.CANCELLED
    with db.transaction() as s:  # the repository's config, as the worker last read it
        s.add(RepoConfigCache(repo=REPO, text="trigger_permission: admin\n"))
    other = a_job(db, JobState.RUNNING, by=("alice", alice))
    token = csrf_of(bob.get(f"/jobs/{other}").get_data(as_text=True))
    refused = bob.post(f"/jobs/{other}/cancel", data={"csrf": token})
    assert refused.status_code == 403 and "(admin)" in refused.get_data(as_text=True)
    assert state_of(db, other) == JobState.RUNNING


def test_live_streams_leave_web_threads_for_deliveries(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db, JobState.RUNNING)
    two_threads = settings.model_copy(update={"web_threads": 2})  # one stream at a time
    client = create_app(two_threads, db=db).test_client()
    signed_in_page(client, github_double, "alice", job_id)
    first = client.get(f"/jobs/{job_id}/events")
    assert first.status_code == 200
    assert client.get(f"/jobs/{job_id}/events").status_code == 503  # the page polls
    first.close()
    again = client.get(f"/jobs/{job_id}/events")
    assert again.status_code == 200
    again.close()
