"""The tables: deliveries, triggers, installations, jobs, outbox, repo configs, users, audit,
the deployment's own id, what /insights reads about onloop's pull requests (fleet work's
tables: fleet_tables.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything onloop stores is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class JobState(StrEnum):
    """The states a job moves through; terminal ones free its idempotency key."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING_FOR_AUTHORIZATION = "waiting_for_authorization"


LIVE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.WAITING_FOR_AUTHORIZATION)
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Delivery(Base):
    """One webhook delivery, keyed by GitHub's X-GitHub-Delivery GUID."""

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    guid: Mapped[str] = mapped_column(String(64), unique=True)
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    repo: Mapped[str | None] = mapped_column(String(200))
    sender: Mapped[str | None] = mapped_column(String(100))
    outcome: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RedeliveryRequest(Base):
    """A delivery onloop asked GitHub to send again: GitHub keeps its GUID
    (https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers), so
    intake lets it through the event-age check, which it would otherwise fail after an outage."""

    __tablename__ = "redelivery_requests"

    guid: Mapped[str] = mapped_column(String(64), primary_key=True)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JobTrigger(Base):
    """A person's act that started work: a command comment, or a label added at a time.

    GitHub sends the same comment again under a new X-GitHub-Delivery GUID when a second hook
    delivers it or a body is replayed; keyed on the act, not the GUID, it starts work once."""

    __tablename__ = "job_triggers"

    trigger_key: Mapped[str] = mapped_column(String(400), primary_key=True)
    delivery_row_id: Mapped[int] = mapped_column("delivery_id", ForeignKey("deliveries.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Installation(Base):
    """A GitHub App installation, kept from installation events."""

    __tablename__ = "installations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account_login: Mapped[str] = mapped_column(String(100))
    account_type: Mapped[str | None] = mapped_column(String(20))
    repositories: Mapped[list[Any]] = mapped_column(default=list)
    suspended: Mapped[bool] = mapped_column(default=False)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class Job(Base):
    """One unit of work; `live_key` is set while live so a second trigger joins it."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    repo: Mapped[str] = mapped_column(String(200), index=True)
    repo_id: Mapped[int | None] = mapped_column(BigInteger)
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    number: Mapped[int | None] = mapped_column(Integer)
    head_sha: Mapped[str | None] = mapped_column(String(40))
    requested_by: Mapped[str] = mapped_column(String(100))
    requested_by_id: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(32), default=JobState.QUEUED, index=True)
    live_key: Mapped[str | None] = mapped_column(String(400), unique=True)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    steps: Mapped[list[Any]] = mapped_column(default=list)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The deliveries row that asked for the job (the column keeps its first name).
    delivery_row_id: Mapped[int | None] = mapped_column("delivery_id", ForeignKey("deliveries.id"))
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    # The check run `onloop/<kind>` the job opened: concluded from outside its run by id, as
    # its head may have moved since (tasks.feedback.listeners, the watchdog).
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    # The W3C traceparent of the delivery span that made the job, while traces are on: the
    # worker's job span is its child, so one trace holds both (app.core.tracing).
    traceparent: Mapped[str | None] = mapped_column(String(55))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Indexed for /jobs: newest first, and its since/until filters (migration 0010).
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What the job spent, for the daily budgets (app/policy/budgets.py).
    agent_tokens_in: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    agent_tokens_out: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    sandbox_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class Outbox(Base):
    """A job waiting to be published to Celery; written in the delivery's transaction."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    publish_attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)


class RepoConfigCache(Base):
    """The last `.github/onloop.yml` a worker read from a repository's default branch."""

    __tablename__ = "repo_configs"

    repo: Mapped[str] = mapped_column(String(200), primary_key=True)
    text: Mapped[str | None] = mapped_column(Text)
    sha: Mapped[str | None] = mapped_column(String(40))
    fetched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class UserAccount(Base):
    """A person who authorised onloop: their GitHub id, login and encrypted token pair."""

    __tablename__ = "user_accounts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    login: Mapped[str] = mapped_column(String(100), index=True)
    access_token: Mapped[str | None] = mapped_column(Text)  # Fernet ciphertext
    access_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    refresh_token: Mapped[str | None] = mapped_column(Text)  # Fernet ciphertext
    refresh_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    authorized_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class Pause(Base):
    """The kill switch: while a row exists, onloop starts no work for the repo or installation."""

    __tablename__ = "pauses"

    scope: Mapped[str] = mapped_column(String(20), primary_key=True)  # "repo" | "installation"
    target: Mapped[str] = mapped_column(String(200), primary_key=True)  # owner/name, or the id
    reason: Mapped[str | None] = mapped_column(Text)
    paused_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditEntry(Base):
    """One decision or action, appended and never changed (the migration forbids it)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    delivery_guid: Mapped[str | None] = mapped_column(String(64))
    repo: Mapped[str | None] = mapped_column(String(200), index=True)
    actor: Mapped[str | None] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    token_kind: Mapped[str | None] = mapped_column(String(20))
    identity: Mapped[str | None] = mapped_column(String(100))


class Deployment(Base):
    """This deployment's one stable id (one row): its sandboxes carry it as a label, so the
    reaper of one onloop never touches another's on a shared Docker daemon."""

    __tablename__ = "deployment"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class JobOutput(Base):
    """A chunk of a job's sandbox output, kept for its page (app/store/joblog.py): capped per
    job, the oldest chunks folded into one `marker` row, purged after ONLOOP_JOB_LOG_DAYS."""

    __tablename__ = "job_output"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer, index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    step: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the step it ran in
    text: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(Integer, default=0)  # bytes of `text`, UTF-8
    marker: Mapped[bool] = mapped_column(default=False)  # "older output dropped" row


class OnloopPull(Base):
    """A pull request on an `onloop/...` branch, from its `pull_request` deliveries: opened,
    merged or closed unmerged, and reverted by a later push to the default branch
    (app/intake/insights.py)."""

    __tablename__ = "onloop_pulls"
    __table_args__ = (UniqueConstraint("repo", "number", name="uq_onloop_pulls_repo_number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    number: Mapped[int] = mapped_column(Integer)
    head_ref: Mapped[str] = mapped_column(String(255))
    head_sha: Mapped[str | None] = mapped_column(String(40))
    opened_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    merged: Mapped[bool] = mapped_column(default=False)
    merge_sha: Mapped[str | None] = mapped_column(String(40))
    reverted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revert_sha: Mapped[str | None] = mapped_column(String(40))
    # People's commits (no Onloop-Job trailer) pushed to the branch before it closed.
    rework_commits: Mapped[int | None] = mapped_column(Integer)


class BranchCommit(Base):
    """A commit pushed to an `onloop/...` branch, from the `push` delivery: `job_id` is its
    `Onloop-Job` trailer; a commit without one is a person's (rework), counted for the pull
    request when it closes. `key` is the same for a commit and its rebased copy (branch,
    message), so a rebase does not count it twice."""

    __tablename__ = "onloop_branch_commits"
    __table_args__ = (UniqueConstraint("repo", "key", name="uq_onloop_branch_commits_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    branch: Mapped[str] = mapped_column(String(255))
    sha: Mapped[str] = mapped_column(String(40), index=True)
    job_id: Mapped[int | None] = mapped_column(Integer)
    pull_number: Mapped[int | None] = mapped_column(Integer)  # set when that PR closed
    key: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
