"""A campaign picked up from the configuration repository starts only when its owner presses
Start on its page (signed in as that GitHub user, with the form's CSRF token); a changed file
waits for them again."""

from __future__ import annotations

import re
from pathlib import Path

import redis
from flask.testing import FlaskClient
from sqlalchemy import select, update

from app.store import audit, campaigns
from app.store.fleet_tables import CampaignState, RepoState
from app.store.models import Job, JobState
from app.web import create_app
from app.web.pages.session import COOKIE, Sessions
from tasks.queue import campaign_ops
from tasks.queue.campaigns import Coordinator
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.pages import pages_redis_url
from tests.integration.test_campaign_coordinator import (
    FILE,
    REPOS,
    coordinator,
    picking_coordinator,
    states,
)

__all__ = ["coordinator", "pages_redis_url"]  # the fixtures
TEXT = FILE.replace("issue_repository: octo/meta\n", "")
START = "Start this campaign"


def jobs(picking: Coordinator) -> list[Job]:
    with picking.db.read() as s:
        return list(s.scalars(select(Job).order_by(Job.id)))


def form_of(html: str) -> dict[str, str]:
    found = dict(re.findall(r'name="(csrf|file)" value="([^"]+)"', html))
    assert set(found) == {"csrf", "file"}, html
    return found


def csrf_of(client: FlaskClient, redis_url: str, picking: Coordinator) -> str:
    """The signed-in person's CSRF token, as a page with a form would carry it."""
    cookie = client.get_cookie(COOKIE)
    assert cookie is not None
    sessions = Sessions(redis.Redis.from_url(redis_url), 1, picking.settings.public_url)
    session = sessions.load(cookie.value)
    assert session is not None
    return session.csrf


def test_only_the_owner_starts_a_picked_up_campaign_and_a_changed_file_waits_again(
    coordinator: Coordinator, github_double: GitHubDouble, tmp_path: Path, pages_redis_url: str
) -> None:
    for name in REPOS:  # mallory may read none of them
        github_double.repo(name).private = True
    github_double.set_permission("octo/r1", "bob", "read")  # sees the campaign, does not own it
    github_double.user("mallory")
    picking = picking_coordinator(coordinator, tmp_path)
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": TEXT})
    assert campaign_ops.pick_up(picking) == ["pace"]
    found = campaigns.by_name(picking.db, "pace")
    assert found is not None
    path = f"/campaigns/{found.id}"
    app = create_app(picking.settings, db=picking.db)

    bob = app.test_client()
    page = open_signed_in(bob, github_double, "bob", path)
    assert page.status_code == 200 and START not in page.get_data(as_text=True)
    assert "no job starts until @alice starts it here" in page.get_data(as_text=True)
    token = csrf_of(bob, pages_redis_url, picking)
    mark = campaigns.file_mark(TEXT)
    said = bob.post(f"{path}/start", data={"csrf": token, "file": mark})
    assert said.status_code == 403 and "@alice" in said.get_data(as_text=True)
    mallory = app.test_client()
    assert open_signed_in(mallory, github_double, "mallory", path).status_code == 404
    token = csrf_of(mallory, pages_redis_url, picking)
    assert mallory.post(f"{path}/start", data={"csrf": token, "file": mark}).status_code == 404
    picking.sweep()
    assert jobs(picking) == [] and campaigns.get(picking.db, found.id).state == "awaiting_owner"

    alice = app.test_client()
    form = form_of(open_signed_in(alice, github_double, "alice", path).get_data(as_text=True))
    assert form["file"] == mark
    forged = alice.post(f"{path}/start", data={"csrf": "forged", "file": mark})
    assert forged.status_code == 400
    done = alice.post(f"{path}/start", data=form)
    assert done.status_code == 303 and done.headers["Location"] == path
    assert campaigns.get(picking.db, found.id).state == CampaignState.ACTIVE
    (entry,) = audit.entries(picking.db, action=audit.CAMPAIGN_APPROVED)
    assert entry.actor == "alice" and entry.detail["campaign_id"] == found.id
    assert jobs(picking) == []  # the web asks; the dispatchers' sweep starts the work
    assert picking.sweep() == [found.id]
    assert states(picking).count(RepoState.RUNNING) == 2
    assert alice.post(f"{path}/start", data=form).status_code == 409  # not awaiting now

    # one job has started; then someone pushes other commands for the campaign
    first, second = jobs(picking)
    with picking.db.transaction() as s:
        s.execute(update(Job).where(Job.id == first.id).values(state=JobState.RUNNING))
    changed = TEXT.replace('run: ["true"]', 'run: ["echo changed"]')
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": changed})
    assert campaign_ops.pick_up(picking) == ["pace"]
    assert campaigns.get(picking.db, found.id).state == CampaignState.AWAITING_OWNER
    picking.sweep()
    by_id = {j.id: j for j in jobs(picking)}
    assert by_id[first.id].state == JobState.RUNNING  # a running job may finish
    assert by_id[second.id].state == JobState.CANCELLED  # one not started would read the new file
    assert len(by_id) == 2 and states(picking).count(RepoState.RUNNING) == 1
    stale = alice.post(f"{path}/start", data=form)  # approves the old file only
    assert stale.status_code == 409
    again = form_of(alice.get(path).get_data(as_text=True))
    assert alice.post(f"{path}/start", data=again).status_code == 303
    picking.sweep()
    assert len(jobs(picking)) == 3  # the withdrawn repository's job again, on the new file


def test_nobody_starts_a_campaign_without_signing_in(
    coordinator: Coordinator, github_double: GitHubDouble, tmp_path: Path
) -> None:
    picking = picking_coordinator(coordinator, tmp_path)
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": TEXT})
    campaign_ops.pick_up(picking)
    found = campaigns.by_name(picking.db, "pace")
    assert found is not None
    client = create_app(picking.settings, db=picking.db).test_client()
    said = client.post(f"/campaigns/{found.id}/start", data={"file": "x"})
    assert said.status_code == 302 and "/oauth/login" in said.headers["Location"]
    assert campaigns.get(picking.db, found.id).state == CampaignState.AWAITING_OWNER
