"""Who acts: the triggering person's permission, and their own token or a request to authorise."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from github import GithubException
from github.Repository import Repository
from sqlalchemy import select

import app.github.clients as gh
from app.core.settings import Settings
from app.github.user_tokens import REFRESH_MARGIN, NotAuthorized, access_token, find_user_id, forget
from app.policy.repo_config import PERMISSION_RANK
from app.store.db import Database
from app.store.models import Job, JobState, Outbox, UserAccount, aware
from tasks.git.process import GitError
from tasks.runner.context import JobContext, WaitForAuthorization
from tasks.runner.notices import ask_to_authorize

FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
MAX_MARGIN = timedelta(hours=4)  # of a token's 8 hours


class NeedsAuthorization(Exception):
    """The person has to authorise onloop (or again) before the job can act in their name."""

    def __init__(self, login: str, reason: str) -> None:
        super().__init__(reason)
        self.login = login
        self.reason = reason


def role_of(repo: Repository, login: str) -> str:
    """The person's role on the repository: read, triage, write, maintain, admin (or none).

    `role_name` is the precise one; `permission` folds triage into read and maintain into
    write (https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user).
    """
    try:
        _, data = repo._requester.requestJsonAndCheck(
            "GET", f"{repo.url}/collaborators/{login}/permission"
        )
    except GithubException as exc:
        if exc.status == 404:
            return "none"
        raise
    role = str(data.get("role_name") or data.get("permission") or "none")
    return role if role in PERMISSION_RANK else "none"


def permitted(role: str, required: str) -> bool:
    return PERMISSION_RANK.get(role, -1) >= PERMISSION_RANK[required]


def token_margin(settings: Settings) -> timedelta:
    """How long a token must still be valid when a job takes it: the whole job, if it can.
    User tokens last 8 hours; a refresh is due when less than this is left."""
    return min(timedelta(seconds=settings.job_time_limit) + REFRESH_MARGIN, MAX_MARGIN)


def user_token(
    ctx: JobContext, login: str, user_id: int | None, *, rejected: gh.UserToken | None = None
) -> gh.UserToken:
    """The person's own token, refreshed when close to expiry (or when GitHub has just
    `rejected` it); NeedsAuthorization otherwise."""
    uid = user_id if user_id is not None else find_user_id(ctx.db, login)
    if uid is None:
        raise NeedsAuthorization(login, "you have not authorised it yet")
    try:
        value, expires = access_token(
            ctx.db,
            ctx.settings,
            uid,
            margin=token_margin(ctx.settings),
            rejected=rejected.secret() if rejected is not None else None,
        )
    except NotAuthorized as exc:
        raise NeedsAuthorization(login, str(exc)) from None
    return gh.UserToken(value, expires or FAR_FUTURE, login=login)


def refused_token(exc: BaseException) -> bool:
    """Whether GitHub refused the token itself (401: revoked, or expired early), as opposed
    to refusing what the token asked for (403, 404...)."""
    if isinstance(exc, GithubException):
        return exc.status == 401
    if isinstance(exc, GitError):
        # git over HTTPS reports a 401 after it sent credentials as this line
        return "Authentication failed for" in exc.output
    return False


class ActsAsPerson(Protocol):
    """What `as_person` needs of a job's work (tasks.blueprints.common.Work)."""

    ctx: JobContext
    repo: Repository
    login: str
    token: gh.UserToken


T = TypeVar("T")


def as_person(work: ActsAsPerson, action: Callable[[], T]) -> T:
    """Run `action`, which uses `work.token`. When GitHub refuses the token (401), the
    token is renewed (another worker's refresh, or a refresh now) and `action` runs once
    more; when the person's authorisation is gone, onloop asks for it again and the job
    waits (WaitForAuthorization), resuming after they authorise."""
    try:
        return action()
    except (GithubException, GitError) as exc:
        if not refused_token(exc):
            raise
    ctx = work.ctx
    try:
        work.token = user_token(ctx, work.login, ctx.job.requested_by_id, rejected=work.token)
        vars(work).pop("user_repo", None)  # a cached client with the old token
        try:
            return action()
        except (GithubException, GitError) as exc:
            if not refused_token(exc):
                raise
            uid = ctx.job.requested_by_id or find_user_id(ctx.db, work.login)
            if uid is not None:
                forget(ctx.db, uid)
            raise NeedsAuthorization(work.login, "GitHub no longer accepts your token") from None
    except NeedsAuthorization as exc:
        ask_to_authorize(ctx, work.repo, work.login, exc.reason)
        raise WaitForAuthorization(exc.reason) from None


def resume_if_authorized(db: Database, job_id: int) -> bool:
    """Requeue job `job_id` if it waits for a person who authorised onloop after the job
    started (they finished the flow while it was deciding to wait); True if requeued."""
    with db.write_lock(), db.transaction() as s:
        job = s.get(Job, job_id, with_for_update=True)
        if job is None or job.state != JobState.WAITING_FOR_AUTHORIZATION:
            return False
        if job.requested_by_id is not None:
            account = s.get(UserAccount, job.requested_by_id)
        else:
            account = s.scalar(select(UserAccount).where(UserAccount.login == job.requested_by))
        started = aware(job.started_at)
        authorized = aware(account.authorized_at) if account is not None else None
        if started is None or authorized is None or authorized <= started:
            return False
        job.state = JobState.QUEUED
        s.add(Outbox(job_id=job.id))
        return True
