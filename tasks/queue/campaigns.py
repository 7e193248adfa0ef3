"""The campaign coordinator: moves a campaign on, one job per repository under its pacing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

import app.github.clients as gh
from app.core.kinds import Kind
from app.core.logs import get_logger
from app.core.settings import Settings
from app.intake.commands import Command
from app.policy.campaign_file import CampaignFile, parse_campaign
from app.store import campaigns as store
from app.store.db import Database
from app.store.fleet_tables import Campaign, CampaignRepo, CampaignState, RepoState
from app.store.models import Job, JobState, Outbox, utcnow
from tasks.blueprints.campaign import ENDED
from tasks.queue.campaign_github import CampaignGitHub
from tasks.runner.context import JobContext

log = get_logger("onloop.campaigns")
LEASE_SECONDS = 120.0  # one coordinator pass at most, then another may take the campaign
RETRY_SECONDS = 10.0  # after a pass failed (GitHub, the database): look again this late
# A dependency in one of these lets its dependents go on; in one of the others they are skipped.
DONE = (RepoState.MERGED, RepoState.NOTHING_TO_CHANGE)
LOST = (RepoState.CLOSED, RepoState.FAILED, RepoState.SKIPPED)


@dataclass
class Coordinator:
    """Advances campaigns: the worker's (after each campaign job, on intake's wake-ups, on
    beat's tick) and the CLI's (at start, resume, cancel and close)."""

    settings: Settings
    db: Database
    github: gh.GitHubApp
    lease_seconds: float = LEASE_SECONDS
    side: CampaignGitHub = field(init=False)

    def __post_init__(self) -> None:
        self.side = CampaignGitHub(self.settings, self.db, self.github)

    def advance(self, campaign_id: int) -> int:
        """Passes over the campaign while it is asked to advance and its lease is free; how
        many ran (0: another coordinator holds it, or nothing was asked)."""
        passes = 0
        while store.claim(self.db, campaign_id, self.lease_seconds) is not None:
            passes += 1
            try:
                self._pass(campaign_id)
            except Exception as exc:
                log.warning(
                    "campaign.pass_failed",
                    campaign_id=campaign_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                store.retry_later(self.db, campaign_id, RETRY_SECONDS)
                return passes
            if not store.release(self.db, campaign_id):
                break
        return passes

    def wake(self, campaign_id: int) -> int:
        store.request_advance(self.db, campaign_id)
        return self.advance(campaign_id)

    def sweep(self) -> list[int]:
        """Advance every campaign asked to (the dispatcher's loop); their ids."""
        done = []
        for campaign_id in store.requested(self.db):
            if self.advance(campaign_id):
                done.append(campaign_id)
        return done

    def _pass(self, campaign_id: int) -> None:
        campaign = store.get(self.db, campaign_id)
        if campaign is None:
            return
        spec = parse_campaign(campaign.text)
        client = self.side.client(campaign.installation_id)
        self._settle_jobs(campaign, store.repos(self.db, campaign_id))
        self.side.refresh(client, store.repos(self.db, campaign_id))
        if campaign.state == CampaignState.ACTIVE:
            self._start(campaign, spec, store.repos(self.db, campaign_id))
        rows = store.repos(self.db, campaign_id)
        self.side.link_siblings(campaign, spec, rows)
        self.side.track(client, campaign, rows)

    def _settle_jobs(self, campaign: Campaign, rows: Sequence[CampaignRepo]) -> None:
        """What each finished job left: a PR, nothing to change, or why it failed."""
        for row in rows:
            if row.state != RepoState.RUNNING or row.job_id is None:
                continue
            job = store.job_of(self.db, row.job_id)
            if job is None or job.state in (JobState.QUEUED, JobState.RUNNING):
                continue
            store.update_repo(self.db, row.id, **outcome_of_job(job, campaign))

    def _start(self, campaign: Campaign, spec: CampaignFile, rows: Sequence[CampaignRepo]) -> None:
        """Start jobs under the pacing, in the file's order, dependents after their
        dependencies merged; a re-run (another change) updates open PRs on the same branch."""
        window = spec.window
        if window is not None and not window.open_at(utcnow()):
            return
        room = spec.pacing.max_open_prs - sum(1 for r in rows if r.state in store.OPEN)
        if spec.pacing.per_hour is not None:
            hour = store.started_since(self.db, campaign.id, utcnow() - timedelta(hours=1))
            room = min(room, spec.pacing.per_hour - hour)
        states = {r.repo.lower(): r for r in rows}
        for row in rows:
            rerun = row.state in (RepoState.PR_OPEN, RepoState.NOTHING_TO_CHANGE) and (
                row.digest != campaign.digest
            )
            if row.state not in (RepoState.QUEUED, RepoState.WAITING_ON_DEPENDENCY) and not rerun:
                continue
            deps = [states[d.lower()] for d in _deps_of(spec, row.repo) if d.lower() in states]
            lost = [d for d in deps if d.state in LOST]
            if lost and not rerun:
                reason = f"it depends on {lost[0].repo}, which is {lost[0].state.replace('_', ' ')}"
                store.update_repo(self.db, row.id, state=RepoState.SKIPPED, reason=reason)
                continue
            if any(d.state not in DONE for d in deps):
                if row.state == RepoState.QUEUED:
                    store.update_repo(self.db, row.id, state=RepoState.WAITING_ON_DEPENDENCY)
                continue
            counts = row.state != RepoState.PR_OPEN  # an open PR is counted already
            if room <= 0 and (counts or spec.pacing.per_hour is not None):
                continue
            if self._create_job(campaign, row):
                room -= 1

    def _create_job(self, campaign: Campaign, row: CampaignRepo) -> bool:
        """The repository's job, through the normal job machinery (a row and its outbox
        message, so the caps and rate limits apply); False when one is live already."""
        command = Command(
            kind=Kind.CAMPAIGN_CHANGE,
            repo=row.repo,
            requested_by=campaign.owner,
            installation_id=campaign.installation_id,
            requested_by_id=campaign.owner_id,
            params={"campaign_id": campaign.id},
        )
        try:
            with self.db.write_lock(), self.db.transaction() as s:
                job = Job(
                    kind=Kind.CAMPAIGN_CHANGE,
                    repo=row.repo,
                    installation_id=campaign.installation_id,
                    requested_by=campaign.owner,
                    requested_by_id=campaign.owner_id,
                    params=command.to_params(),
                    live_key=f"campaign:{campaign.id}:{row.repo}",
                )
                s.add(job)
                s.flush()
                s.add(Outbox(job_id=job.id))
                found = s.scalar(select(CampaignRepo).where(CampaignRepo.id == row.id))
                assert found is not None
                found.state, found.job_id, found.reason = RepoState.RUNNING, job.id, None
                found.started_at, found.digest = utcnow(), campaign.digest
        except IntegrityError:
            return False
        log.info("campaign.job_created", campaign_id=campaign.id, repo=row.repo, job_id=job.id)
        return True


def _deps_of(spec: CampaignFile, repo: str) -> list[str]:
    for name, deps in spec.depends_on.items():
        if name.lower() == repo.lower():
            return deps
    return []


def outcome_of_job(job: Job, campaign: Campaign) -> dict[str, Any]:
    """The repository's new values once its job ended."""
    result = job.result or {}
    if job.state == JobState.SUCCEEDED and result.get("outcome") == "pr":
        return {"state": RepoState.PR_OPEN, "pr_number": result.get("pr"), "reason": None}
    if job.state == JobState.SUCCEEDED:
        return {"state": RepoState.NOTHING_TO_CHANGE, "reason": None}
    if result.get("outcome") == ENDED:  # it stopped itself before pushing
        return {"state": RepoState.SKIPPED, "reason": f"the campaign was {campaign.state}"}
    if job.state == JobState.CANCELLED:  # by a person (the job page) or by the campaign
        if campaign.state in (CampaignState.ACTIVE, CampaignState.AWAITING_OWNER):
            reason = "its job was cancelled; `onloop campaign start` again retries it"
            return {"state": RepoState.SKIPPED, "reason": reason}
        return {"state": RepoState.SKIPPED, "reason": f"the campaign was {campaign.state}"}
    if job.state == JobState.WAITING_FOR_AUTHORIZATION:
        return {"state": RepoState.FAILED, "reason": f"@{campaign.owner} must authorise onloop"}
    return {"state": RepoState.FAILED, "reason": str(result.get("error") or "the job failed")[:500]}


class CampaignWaker:
    """A campaign job's listener: once it ends, its campaign moves on (a job listener's
    failures never fail the job)."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    def steps_changed(self, ctx: JobContext) -> None:
        return None

    def finished(self, ctx: JobContext, state: str, result: dict[str, Any]) -> None:
        campaign_id = ctx.params.get("campaign_id")
        if campaign_id is not None:
            self.coordinator.wake(int(campaign_id))
