"""The coordinator on the double without a worker: pacing, pause, cancel, window, the lease,
and the owner's checks at start."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from app.core.crypto import TokenBox
from app.github.clients import GitHubApp
from app.github.user_tokens import TokenPair, store
from app.store import campaigns
from app.store.db import Database
from app.store.fleet_tables import CampaignRepo, CampaignState, RepoState
from app.store.models import Job, JobState, Outbox
from tasks.queue import campaign_ops
from tasks.queue.campaign_github import CampaignRefused
from tasks.queue.campaigns import Coordinator
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for

REPOS = [f"octo/r{n}" for n in range(1, 6)]
FILE = """\
name: pace
owner: alice
repositories: [octo/r*]
change:
  run: ["true"]
pacing:
  max_open_prs: 2
  per_hour: 3
issue_repository: octo/meta
"""


@pytest.fixture
def coordinator(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> Iterator[Coordinator]:
    redis_url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    settings = settings_for(github_double, tmp_path, database_url=database_url, redis_url=redis_url)
    github_double.create_repo("octo/meta")
    for name in REPOS:
        github_double.create_repo(name)
        github_double.set_permission(name, "alice", "write")
    db = Database(database_url)
    user = github_double.user("alice")
    pair = TokenPair(github_double.issue_user_token("alice"), None, None, None)
    store(db, TokenBox(SECRET_KEY), user.id, "alice", pair)
    yield Coordinator(settings, db, GitHubApp.for_settings(settings))
    db.dispose()


def states(coordinator: Coordinator) -> list[str]:
    found = campaigns.by_name(coordinator.db, "pace")
    assert found is not None
    return [r.state for r in campaigns.repos(coordinator.db, found.id)]


def finish_jobs(coordinator: Coordinator, outcome: str = "nothing_to_change") -> None:
    """The worker's part, done by hand: every queued campaign job ends with `outcome`."""
    with coordinator.db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.state == JobState.QUEUED)
            .values(state=JobState.SUCCEEDED, live_key=None, result={"outcome": outcome})
        )


def test_pacing_pause_resume_and_cancel(
    coordinator: Coordinator, github_double: GitHubDouble
) -> None:
    started = campaign_ops.start(coordinator, FILE)
    assert (started.repositories, started.skipped, started.created) == (5, 0, True)
    assert states(coordinator).count(RepoState.RUNNING) == 2  # max_open_prs
    with coordinator.db.read() as s:
        jobs = list(s.scalars(select(Job)))
        outbox = list(s.scalars(select(Outbox)))
    assert {j.kind for j in jobs} == {"campaign_change"} and len(outbox) == 2
    assert {j.requested_by for j in jobs} == {"alice"} and all(j.number is None for j in jobs)
    finish_jobs(coordinator)
    campaign = campaigns.by_name(coordinator.db, "pace")
    assert campaign is not None
    coordinator.wake(campaign.id)
    assert states(coordinator).count(RepoState.NOTHING_TO_CHANGE) == 2
    assert states(coordinator).count(RepoState.RUNNING) == 1  # per_hour: 3 started this hour
    finish_jobs(coordinator)
    coordinator.wake(campaign.id)
    assert states(coordinator).count(RepoState.QUEUED) == 2  # the hour is used up
    (issue,) = github_double.repo("octo/meta").issues.values()
    assert "nothing to change: 3" in (issue.body or "") and "queued: 2" in (issue.body or "")

    campaign_ops.pause(coordinator, "pace")
    with coordinator.db.transaction() as s:  # the hour has passed
        s.execute(update(CampaignRepo).values(started_at=None))
    coordinator.wake(campaign.id)
    assert states(coordinator).count(RepoState.QUEUED) == 2  # paused: nothing starts
    campaign_ops.resume(coordinator, "pace")
    assert states(coordinator).count(RepoState.RUNNING) == 2
    stopped = campaign_ops.cancel(coordinator, "pace")
    assert len(stopped) == 2
    coordinator.wake(campaign.id)
    assert states(coordinator).count(RepoState.SKIPPED) == 2
    status = campaign_ops.status(coordinator, "pace")
    assert status["state"] == "cancelled" and status["totals"] == {
        "nothing_to_change": 3,
        "skipped": 2,
    }
    with pytest.raises(CampaignRefused, match="cancelled"):
        campaign_ops.pause(coordinator, "pace")


def test_a_closed_window_starts_nothing_and_the_lease_is_one_holders(
    coordinator: Coordinator,
) -> None:
    closed = FILE.replace("per_hour: 3", 'window: "Mon 00:00-00:01 UTC"')
    campaign_ops.start(coordinator, closed)
    assert set(states(coordinator)) == {RepoState.QUEUED}
    found = campaigns.by_name(coordinator.db, "pace")
    assert found is not None
    campaigns.request_advance(coordinator.db, found.id)
    assert campaigns.claim(coordinator.db, found.id, 60) is not None
    campaigns.request_advance(coordinator.db, found.id)
    assert campaigns.claim(coordinator.db, found.id, 60) is None  # held
    assert coordinator.advance(found.id) == 0
    assert campaigns.release(coordinator.db, found.id)  # asked again meanwhile
    assert campaigns.requested(coordinator.db) == [found.id]


def test_the_owner_must_have_signed_in(coordinator: Coordinator) -> None:
    with pytest.raises(CampaignRefused, match="@bob has not signed in"):
        campaign_ops.start(coordinator, FILE.replace("owner: alice", "owner: bob"))
    with pytest.raises(CampaignRefused, match="issue_repository"):
        campaign_ops.start(coordinator, FILE.replace("issue_repository: octo/meta\n", ""))


def picking_coordinator(coordinator: Coordinator, tmp_path: Path) -> Coordinator:
    """`coordinator` with an organisation file naming octo/meta as the campaigns' repository."""
    org = tmp_path / "onloop-org.yml"
    org.write_text("campaigns:\n  repository: octo/meta\n")
    settings = coordinator.settings.model_copy(update={"config_file": org})
    return Coordinator(settings, coordinator.db, coordinator.github)


def test_campaign_files_are_picked_up_from_the_configuration_repository_to_await_the_owner(
    coordinator: Coordinator, github_double: GitHubDouble, tmp_path: Path
) -> None:
    picking = picking_coordinator(coordinator, tmp_path)
    assert campaign_ops.pick_up(picking) == []  # no campaigns/ folder yet
    text = FILE.replace("issue_repository: octo/meta\n", "")
    bad = "name: broken\nowner: alice\nrepositories: [octo/r1]\nchange: {run: []}\n"
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": text, "campaigns/b.yml": bad})
    assert campaign_ops.pick_up(picking) == ["pace"]
    found = campaigns.by_name(coordinator.db, "pace")
    assert found is not None and found.state == CampaignState.AWAITING_OWNER
    assert set(states(coordinator)) == {RepoState.QUEUED}  # no job until alice says so
    picking.sweep()
    with coordinator.db.read() as s:
        assert list(s.scalars(select(Job))) == []
    (issue,) = github_double.repo("octo/meta").issues.values()
    assert "onloop campaign **pace**" in (issue.body or "")
    page = f"{picking.settings.public_url.rstrip('/')}/campaigns/{found.id}"
    assert f"It waits for @alice to start it at {page}" in (issue.body or "")
    assert campaign_ops.pick_up(picking) == []  # unchanged: left alone
    assert campaigns.by_name(coordinator.db, "broken") is None
    for refused in (campaign_ops.resume, campaign_ops.pause):
        with pytest.raises(CampaignRefused, match="@alice approves it on its page"):
            refused(picking, "pace")
    assert campaign_ops.status(picking, "pace")["state"] == "awaiting_owner"
    # the operator's own `onloop campaign start FILE` starts it at once
    campaign_ops.start(picking, text, issue_repo="octo/meta")
    assert states(coordinator).count(RepoState.RUNNING) == 2


def test_a_pushed_file_stays_in_its_configuration_repository_and_takes_no_campaign_over(
    coordinator: Coordinator, github_double: GitHubDouble, tmp_path: Path
) -> None:
    picking = picking_coordinator(coordinator, tmp_path)
    elsewhere = FILE.replace("issue_repository: octo/meta", "issue_repository: octo/r1")
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": elsewhere})
    assert campaign_ops.pick_up(picking) == []  # its tracking issue may not go to octo/r1
    assert campaigns.by_name(coordinator.db, "pace") is None

    campaign_ops.start(coordinator, FILE)  # the operator's, with its own owner, alice
    taken = FILE.replace("owner: alice", "owner: bob").replace("issue_repository: octo/meta\n", "")
    github_double.commit("octo/meta", "main", {"campaigns/pace.yml": taken})
    assert campaign_ops.pick_up(picking) == []  # the name is alice's campaign
    found = campaigns.by_name(coordinator.db, "pace")
    assert found is not None and found.owner == "alice" and found.state == CampaignState.ACTIVE
