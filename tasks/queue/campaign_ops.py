"""What a person does to a campaign: start (or re-run) it, pause, resume, cancel, close."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from github import GithubException

from app.core.logs import get_logger
from app.github.user_tokens import find_user_id
from app.policy.campaign_file import campaigns_repository, parse_campaign
from app.policy.repo_config import ConfigError
from app.store import campaigns as store
from app.store.fleet_tables import Campaign, CampaignState, RepoState
from tasks.feedback.campaigns import start_url
from tasks.queue.campaign_github import CampaignRefused
from tasks.queue.campaigns import Coordinator

STOPPED = (RepoState.QUEUED, RepoState.WAITING_ON_DEPENDENCY)
FOLDER = "campaigns"  # of the configuration repository: one campaign file each
log = get_logger("onloop.campaigns")


@dataclass(frozen=True)
class Started:
    campaign_id: int
    created: bool
    repositories: int
    skipped: int


def start(
    coordinator: Coordinator,
    text: str,
    issue_repo: str | None = None,
    state: CampaignState = CampaignState.ACTIVE,
) -> Started:
    """Validate the file (ConfigError with its line), check its owner, resolve its
    repositories, save it and take its first step. The same file again changes nothing;
    a new change updates the open PRs on the same branch. `issue_repo`: where the tracking
    issue goes when the file names none (the configuration repository it came from);
    `state` AWAITING_OWNER: no job starts until the owner approves it on its page."""
    spec = parse_campaign(text)
    if spec.issue_repository is None and issue_repo is not None:
        spec = spec.model_copy(update={"issue_repository": issue_repo})
    if spec.issue_repository is None:
        raise CampaignRefused(
            "issue_repository: name the repository for the campaign's tracking issue"
        )
    db, settings = coordinator.db, coordinator.settings
    owner_id = find_user_id(db, spec.owner)
    if owner_id is None:
        raise CampaignRefused(
            f"@{spec.owner} has not signed in to onloop, so no PR can be opened in their name; "
            f"they sign in at {settings.public_url.rstrip('/')}/oauth/login"
        )
    side = coordinator.side
    installation_id = side.installation_of(spec.issue_repository)
    repos = side.resolve(spec, installation_id)
    if not repos:
        raise CampaignRefused("repositories: no repository of the installation matches")
    new = store.NewCampaign(
        name=spec.name,
        owner=spec.owner,
        owner_id=owner_id,
        installation_id=installation_id,
        text=text,
        digest=spec.digest(),
        issue_repo=spec.issue_repository,
        repos=repos,
    )
    campaign_id, created = store.save(db, new, state)
    coordinator.advance(campaign_id)
    skipped = sum(1 for _, reason in repos if reason)
    return Started(campaign_id, created, len(repos), skipped)


def pick_up(coordinator: Coordinator) -> list[str]:
    """Save (or update) the campaigns of the `campaigns/` folder of the configuration
    repository the organisation file names, each awaiting its owner's approval (whoever can
    push there wrote it, not necessarily the owner); a file unchanged since it was saved is
    left alone, a bad one is logged with its line. The names of the campaigns saved."""
    repo_name = campaigns_repository(coordinator.settings.config_file)
    if repo_name is None:
        return []
    side = coordinator.side
    repo = side.client(side.installation_of(repo_name)).get_repo(repo_name)
    try:
        listed = repo.get_contents(FOLDER)
    except GithubException as exc:
        if exc.status == 404:
            return []
        raise
    started = []
    for item in listed if isinstance(listed, list) else [listed]:
        if item.type != "file" or not item.name.endswith((".yml", ".yaml")):
            continue
        text = item.decoded_content.decode("utf-8", errors="replace")
        where = f"{repo_name}/{item.path}"
        try:
            spec = parse_campaign(text)
            name = spec.name
            saved = store.by_name(coordinator.db, name)
            if saved is not None and saved.text == text:
                continue
            _refuse_foreign(coordinator, spec.issue_repository, spec.owner, saved, repo_name)
            start(coordinator, text, issue_repo=repo_name, state=CampaignState.AWAITING_OWNER)
        except (ConfigError, CampaignRefused) as exc:
            log.warning("campaign.file_refused", file=where, error=str(exc))
            continue
        started.append(name)
    return started


def _refuse_foreign(
    coordinator: Coordinator,
    issue_repo: str | None,
    owner: str,
    saved: Campaign | None,
    repo_name: str,
) -> None:
    """A pushed file stays within its configuration repository: it may not send the tracking
    issue (and so the installation it acts in) elsewhere, nor take over a campaign of that
    name that another owner, or the operator's CLI, started."""
    if issue_repo is not None and issue_repo.lower() != repo_name.lower():
        raise CampaignRefused(
            f"issue_repository: a file of {repo_name} keeps its tracking issue there "
            f"(it names {issue_repo})"
        )
    if saved is None:
        return
    if saved.issue_repo.lower() != repo_name.lower():
        raise CampaignRefused(f"name: the campaign {saved.name} was not started from {repo_name}")
    if saved.owner_id != find_user_id(coordinator.db, owner):
        raise CampaignRefused(f"owner: the campaign {saved.name} is @{saved.owner}'s")


def named(coordinator: Coordinator, name: str) -> Campaign:
    found = store.by_name(coordinator.db, name)
    if found is None:
        raise CampaignRefused(f"no campaign is named {name}")
    return found


def pause(coordinator: Coordinator, name: str) -> None:
    """No new job starts; running ones finish and open PRs stay."""
    campaign = named(coordinator, name)
    _refuse_ended(campaign)
    _refuse_awaiting(coordinator, campaign)
    store.set_state(coordinator.db, campaign.id, CampaignState.PAUSED)
    coordinator.advance(campaign.id)


def resume(coordinator: Coordinator, name: str) -> None:
    campaign = named(coordinator, name)
    _refuse_ended(campaign)
    _refuse_awaiting(coordinator, campaign)
    store.set_state(coordinator.db, campaign.id, CampaignState.ACTIVE)
    coordinator.advance(campaign.id)


def cancel(coordinator: Coordinator, name: str) -> list[int]:
    """Stop queued work: queued jobs are cancelled and waiting repositories skipped; open
    PRs stay open (`close` closes them). The ids of the jobs cancelled."""
    campaign = named(coordinator, name)
    store.set_state(coordinator.db, campaign.id, CampaignState.CANCELLED)
    stopped = store.stop_queued_jobs(coordinator.db, campaign.id, "the campaign was cancelled")
    _skip_waiting(coordinator, campaign.id, "the campaign was cancelled")
    coordinator.advance(campaign.id)
    return stopped


def close(coordinator: Coordinator, name: str) -> list[str]:
    """Cancel, then close every unmerged PR with a comment in the owner's name; the
    repositories whose PR was closed."""
    campaign = named(coordinator, name)
    store.set_state(coordinator.db, campaign.id, CampaignState.CLOSED)
    store.stop_queued_jobs(coordinator.db, campaign.id, "the campaign was closed")
    _skip_waiting(coordinator, campaign.id, "the campaign was closed")
    closed = coordinator.side.close_open(campaign, store.repos(coordinator.db, campaign.id))
    store.request_advance(coordinator.db, campaign.id)
    coordinator.advance(campaign.id)
    return closed


def status(coordinator: Coordinator, name: str) -> dict[str, Any]:
    """The campaign and each repository, as `onloop campaign status` prints them."""
    campaign = named(coordinator, name)
    rows = store.repos(coordinator.db, campaign.id)
    return {
        "name": campaign.name,
        "owner": campaign.owner,
        "state": campaign.state,
        "tracking_issue": f"{campaign.issue_repo}#{campaign.issue_number}"
        if campaign.issue_number
        else None,
        "totals": dict(Counter(str(r.state) for r in rows)),
        "repositories": [
            {
                "repo": r.repo,
                "state": r.state,
                "pr": r.pr_number,
                "ci": r.ci_state,
                "reason": r.reason,
                "job": r.job_id,
            }
            for r in rows
        ],
    }


def _refuse_ended(campaign: Campaign) -> None:
    if campaign.state in (CampaignState.CANCELLED, CampaignState.CLOSED):
        raise CampaignRefused(
            f"the campaign is {campaign.state}; `onloop campaign start FILE` starts it again"
        )


def _refuse_awaiting(coordinator: Coordinator, campaign: Campaign) -> None:
    """A file someone pushed to the configuration repository runs only once its owner said
    so: the operator neither resumes it nor pauses it (a resume would follow)."""
    if campaign.state == CampaignState.AWAITING_OWNER:
        raise CampaignRefused(
            f"the campaign awaits its owner: @{campaign.owner} approves it on its page, "
            f"{start_url(coordinator.settings.public_url, campaign.id)}"
        )


def _skip_waiting(coordinator: Coordinator, campaign_id: int, reason: str) -> None:
    for row in store.repos(coordinator.db, campaign_id):
        if row.state in STOPPED:
            store.update_repo(coordinator.db, row.id, state=RepoState.SKIPPED, reason=reason)
