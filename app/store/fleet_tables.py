"""The tables of fleet work: schedule slots and approvals, campaigns and their repositories."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.store.models import Base, utcnow


class ScheduleSlot(Base):
    """One slot of a repository's schedule (`schedules:`), claimed by the first beat tick to
    reach it: the unique row fires it once, however many beat processes tick
    (tasks/queue/schedules.py). `outcome` is a ScheduleOutcome, `job_ids` what it started."""

    __tablename__ = "schedule_slots"
    __table_args__ = (UniqueConstraint("repo", "schedule", "slot", name="uq_schedule_slots_slot"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    schedule: Mapped[str] = mapped_column(String(40))
    slot: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    job_ids: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ScheduleApproval(Base):
    """A schedule's owner's consent to it, as it is (`digest`: the entry and the commands it
    runs): whoever can push `.github/onloop.yml` names the owner, so nothing runs in their
    name until they approve it on its page (tasks/queue/schedule_consent.py)."""

    __tablename__ = "schedule_approvals"
    __table_args__ = (
        UniqueConstraint("repo", "schedule", "digest", name="uq_schedule_approvals_digest"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200))
    schedule: Mapped[str] = mapped_column(String(40))
    digest: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)  # what the owner is shown and approves
    approved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CampaignState(StrEnum):
    """A campaign as a whole: only an active one starts work."""

    ACTIVE = "active"
    # Picked up from the configuration repository (or its file changed there): no job starts
    # until its owner presses Start on its page (anyone who can push there wrote it).
    AWAITING_OWNER = "awaiting_owner"
    PAUSED = "paused"
    CANCELLED = "cancelled"  # queued work stopped; open pull requests stay
    CLOSED = "closed"  # its unmerged pull requests were closed


class RepoState(StrEnum):
    """One repository of a campaign."""

    QUEUED = "queued"
    WAITING_ON_DEPENDENCY = "waiting_on_dependency"
    RUNNING = "running"  # its job is queued or running
    PR_OPEN = "pr_open"
    MERGED = "merged"
    CLOSED = "closed"  # its pull request closed unmerged
    SKIPPED = "skipped"  # with the reason
    NOTHING_TO_CHANGE = "nothing_to_change"
    FAILED = "failed"  # its job failed, with the reason


class Campaign(Base):
    """One change across many repositories, in its owner's name (app/policy/campaign_file.py)."""

    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    owner: Mapped[str] = mapped_column(String(100))
    owner_id: Mapped[int | None] = mapped_column(BigInteger)
    installation_id: Mapped[int] = mapped_column(BigInteger)
    text: Mapped[str] = mapped_column(Text)  # the campaign file as given
    digest: Mapped[str] = mapped_column(String(16))  # of its change (CampaignFile.digest)
    state: Mapped[str] = mapped_column(String(20), default=CampaignState.ACTIVE)
    issue_repo: Mapped[str] = mapped_column(String(200))
    issue_number: Mapped[int | None] = mapped_column(Integer)
    # Set when something may move the campaign on (a job ended, a PR merged); cleared by the
    # coordinator that advances it under `lease_until` (tasks/queue/campaigns.py).
    advance_requested_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), index=True
    )
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class CampaignRepo(Base):
    """One repository of a campaign: its state, job, pull request and CI."""

    __tablename__ = "campaign_repositories"
    __table_args__ = (UniqueConstraint("campaign_id", "repo", name="uq_campaign_repositories"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("campaigns.id"), index=True)
    repo: Mapped[str] = mapped_column(String(200))
    state: Mapped[str] = mapped_column(String(32), default=RepoState.QUEUED)
    reason: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(Integer)
    pr_number: Mapped[int | None] = mapped_column(Integer)
    ci_state: Mapped[str | None] = mapped_column(String(20))
    digest: Mapped[str | None] = mapped_column(String(16))  # the change its last job made
    siblings: Mapped[str | None] = mapped_column(String(64))  # digest of its PR's sibling list
    # "<head sha>:<base sha>" of the conflicted PR last made again on its new base: once each.
    rebase_of: Mapped[str | None] = mapped_column(String(81))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
