"""Campaign rows: saving a campaign, its repositories' states, and who advances it when."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from app.store.db import Database, rowcount
from app.store.fleet_tables import Campaign, CampaignRepo, CampaignState, RepoState
from app.store.models import Job, JobState, utcnow

# A repository in one of these states has a pull request or a job that may become one: the
# ones `max_open_prs` counts.
OPEN = (RepoState.RUNNING, RepoState.PR_OPEN)
# States a repository never leaves on its own (a re-run with another change may still).
SETTLED = (
    RepoState.MERGED,
    RepoState.CLOSED,
    RepoState.SKIPPED,
    RepoState.NOTHING_TO_CHANGE,
    RepoState.FAILED,
)
# How people read the states (the tracking issue, the page).
LABELS: dict[str, str] = {
    RepoState.QUEUED: "queued",
    RepoState.WAITING_ON_DEPENDENCY: "waiting on a dependency",
    RepoState.RUNNING: "working",
    RepoState.PR_OPEN: "PR open",
    RepoState.MERGED: "merged",
    RepoState.CLOSED: "closed",
    RepoState.SKIPPED: "skipped",
    RepoState.NOTHING_TO_CHANGE: "nothing to change",
    RepoState.FAILED: "failed",
}
# intake's wake-up, in the delivery's own transaction: a campaign's pull request changed.
WAKE = (
    "UPDATE campaigns SET advance_requested_at = %s WHERE id IN (SELECT campaign_id FROM"
    " campaign_repositories WHERE repo = %s AND pr_number = %s)"
)

# A push to a repository's default branch: its campaign PRs may conflict now.
WAKE_REPO = (
    "UPDATE campaigns SET advance_requested_at = %s WHERE id IN (SELECT campaign_id FROM"
    " campaign_repositories WHERE repo = %s AND state = 'pr_open')"
)


@dataclass(frozen=True)
class NewCampaign:
    """What `onloop campaign start` resolved: the file, its owner, and each repository with
    the reason it is skipped (None: it takes part)."""

    name: str
    owner: str
    owner_id: int | None
    installation_id: int
    text: str
    digest: str
    issue_repo: str
    repos: Sequence[tuple[str, str | None]]


def save(
    db: Database, new: NewCampaign, state: CampaignState = CampaignState.ACTIVE
) -> tuple[int, bool]:
    """Create the campaign, or take the new file for the one of that name: repositories it
    did not have are queued, failed ones queued again, the rest keep their state (their
    next run is decided by the digest). `state` ACTIVE (the operator's CLI) starts it (a
    cancelled or awaiting one too); AWAITING_OWNER (a file someone pushed) holds it for its
    owner's approval, and its jobs not started yet are withdrawn (they would read the new
    file). (id, whether it was created)."""
    with db.write_lock(), db.transaction() as s:
        row = s.scalar(select(Campaign).where(Campaign.name == new.name).with_for_update())
        created = row is None
        if row is None:
            row = Campaign(name=new.name, state=state)
            s.add(row)
        row.owner, row.owner_id, row.installation_id = new.owner, new.owner_id, new.installation_id
        row.text, row.digest, row.issue_repo = new.text, new.digest, new.issue_repo
        if state == CampaignState.AWAITING_OWNER:
            row.state = state
        elif row.state in (CampaignState.CANCELLED, CampaignState.AWAITING_OWNER):
            row.state = CampaignState.ACTIVE
        row.advance_requested_at = utcnow()
        s.flush()
        if state == CampaignState.AWAITING_OWNER:
            _withdraw_queued(s, row.id)
        known = {
            r.repo: r
            for r in s.scalars(select(CampaignRepo).where(CampaignRepo.campaign_id == row.id))
        }
        for repo, skipped in new.repos:
            repo_state = RepoState.SKIPPED if skipped else RepoState.QUEUED
            found = known.get(repo)
            if found is None:
                s.add(CampaignRepo(campaign_id=row.id, repo=repo, state=repo_state, reason=skipped))
            elif skipped or found.state in (RepoState.FAILED, RepoState.SKIPPED):
                found.state, found.reason = repo_state, skipped
        return row.id, created


def _withdraw_queued(s: Session, campaign_id: int) -> None:
    """The campaign's jobs not started yet are cancelled and their repositories queued again."""
    rows = s.execute(
        select(CampaignRepo, Job)
        .join(Job, CampaignRepo.job_id == Job.id)
        .where(CampaignRepo.campaign_id == campaign_id, Job.state == JobState.QUEUED)
    )
    for repo, job in rows:
        job.state, job.live_key, job.finished_at = JobState.CANCELLED, None, utcnow()
        job.result = {"reason": "the campaign file changed: it waits for its owner"}
        repo.state, repo.job_id, repo.started_at = RepoState.QUEUED, None, None


def file_mark(text: str) -> str:
    """Names one campaign file's text: the page's Start button approves that text only."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def approve(db: Database, campaign_id: int, mark: str) -> bool:
    """The owner started the campaign awaiting them, as of the file (`file_mark`) they saw;
    False when it no longer awaits them or its file changed meanwhile."""
    with db.write_lock(), db.transaction() as s:
        row = s.scalar(select(Campaign).where(Campaign.id == campaign_id).with_for_update())
        if row is None or row.state != CampaignState.AWAITING_OWNER:
            return False
        if file_mark(row.text) != mark:
            return False
        row.state, row.advance_requested_at = CampaignState.ACTIVE, utcnow()
    return True


def by_name(db: Database, name: str) -> Campaign | None:
    with db.read() as s:
        return s.scalar(select(Campaign).where(Campaign.name == name))


def get(db: Database, campaign_id: int) -> Campaign | None:
    with db.read() as s:
        return s.get(Campaign, campaign_id)


def repos(db: Database, campaign_id: int) -> list[CampaignRepo]:
    """The campaign's repositories, in the order the file resolved them."""
    with db.read() as s:
        query = select(CampaignRepo).where(CampaignRepo.campaign_id == campaign_id)
        return list(s.scalars(query.order_by(CampaignRepo.id)))


def set_state(db: Database, campaign_id: int, state: CampaignState) -> None:
    with db.write_lock(), db.transaction() as s:
        s.execute(
            update(Campaign)
            .where(Campaign.id == campaign_id)
            .values(state=state, advance_requested_at=utcnow())
        )


def request_advance(db: Database, campaign_id: int) -> None:
    """Something may move the campaign on: the next coordinator pass looks at it."""
    with db.write_lock(), db.transaction() as s:
        s.execute(
            update(Campaign).where(Campaign.id == campaign_id).values(advance_requested_at=utcnow())
        )


def request_all(db: Database) -> int:
    """Every campaign that is not closed is looked at again (beat's safety net)."""
    with db.write_lock(), db.transaction() as s:
        done = s.execute(
            update(Campaign)
            .where(Campaign.state != CampaignState.CLOSED)
            .values(advance_requested_at=utcnow())
        )
    return rowcount(done)


def requested(db: Database) -> list[int]:
    """The campaigns asked to advance whose lease is free."""
    now = utcnow()
    with db.read() as s:
        query = select(Campaign.id).where(
            Campaign.advance_requested_at.is_not(None),
            or_(Campaign.lease_until.is_(None), Campaign.lease_until < now),
        )
        return list(s.scalars(query.order_by(Campaign.id)))


def claim(db: Database, campaign_id: int, seconds: float) -> datetime | None:
    """Take the campaign's lease and its request (one coordinator at a time): the request's
    time when taken, None when another holds the lease or nothing was asked."""
    now = utcnow()
    with db.write_lock(), db.transaction() as s:
        asked = s.scalar(select(Campaign.advance_requested_at).where(Campaign.id == campaign_id))
        if asked is None:
            return None
        done = s.execute(
            update(Campaign)
            .where(
                Campaign.id == campaign_id,
                or_(Campaign.lease_until.is_(None), Campaign.lease_until < now),
            )
            .values(lease_until=now + timedelta(seconds=seconds), advance_requested_at=None)
        )
    return asked if rowcount(done) else None


def release(db: Database, campaign_id: int) -> bool:
    """Give the lease back; whether the campaign was asked to advance meanwhile."""
    with db.write_lock(), db.transaction() as s:
        s.execute(update(Campaign).where(Campaign.id == campaign_id).values(lease_until=None))
        asked = s.scalar(select(Campaign.advance_requested_at).where(Campaign.id == campaign_id))
    return asked is not None


def set_issue(db: Database, campaign_id: int, number: int) -> None:
    with db.write_lock(), db.transaction() as s:
        s.execute(update(Campaign).where(Campaign.id == campaign_id).values(issue_number=number))


def update_repo(db: Database, row_id: int, **values: object) -> None:
    with db.write_lock(), db.transaction() as s:
        s.execute(update(CampaignRepo).where(CampaignRepo.id == row_id).values(**values))


def job_of(db: Database, job_id: int) -> Job | None:
    with db.read() as s:
        return s.get(Job, job_id)


def started_since(db: Database, campaign_id: int, since: datetime) -> int:
    """How many of the campaign's jobs started after `since` (its `per_hour`)."""
    with db.read() as s:
        rows = s.scalars(
            select(CampaignRepo.id).where(
                CampaignRepo.campaign_id == campaign_id, CampaignRepo.started_at >= since
            )
        )
        return len(list(rows))


def stop_queued_jobs(db: Database, campaign_id: int, reason: str) -> list[int]:
    """Cancel the campaign's jobs that have not started; their ids."""
    with db.write_lock(), db.transaction() as s:
        ids = list(
            s.scalars(
                select(Job.id)
                .join(CampaignRepo, CampaignRepo.job_id == Job.id)
                .where(CampaignRepo.campaign_id == campaign_id, Job.state == JobState.QUEUED)
            )
        )
        if ids:
            s.execute(
                update(Job)
                .where(Job.id.in_(ids), Job.state == JobState.QUEUED)
                .values(
                    state=JobState.CANCELLED,
                    live_key=None,
                    finished_at=utcnow(),
                    result={"reason": reason},
                )
            )
    return ids


def retry_later(db: Database, campaign_id: int, seconds: float) -> None:
    """A pass failed: asked again, and the lease held `seconds` so no loop retries at once."""
    now = utcnow()
    with db.write_lock(), db.transaction() as s:
        s.execute(
            update(Campaign)
            .where(Campaign.id == campaign_id)
            .values(advance_requested_at=now, lease_until=now + timedelta(seconds=seconds))
        )


def counts(db: Database) -> list[tuple[str, str, str, int]]:
    """(campaign, its state, a repository state, how many) for /metrics."""
    with db.read() as s:
        rows = s.execute(
            select(Campaign.name, Campaign.state, CampaignRepo.state, func.count())
            .join(CampaignRepo, CampaignRepo.campaign_id == Campaign.id)
            .group_by(Campaign.name, Campaign.state, CampaignRepo.state)
        )
        return [(name, state, repo_state, int(n)) for name, state, repo_state, n in rows]
