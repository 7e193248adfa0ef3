"""Who acts: the triggering person's permission, and their own token or a request to authorise."""

from __future__ import annotations

from datetime import UTC, datetime

from github import GithubException
from github.Repository import Repository

import app.github as gh
from app.repo_config import PERMISSION_RANK
from app.user_tokens import NotAuthorized, access_token, find_user_id
from tasks.context import JobContext

FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


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


def user_token(ctx: JobContext, login: str, user_id: int | None) -> gh.UserToken:
    """The person's own token, refreshed when close to expiry; NeedsAuthorization otherwise."""
    uid = user_id if user_id is not None else find_user_id(ctx.db, login)
    if uid is None:
        raise NeedsAuthorization(login, "has not authorised onloop yet")
    try:
        value, expires = access_token(ctx.db, ctx.settings, uid)
    except NotAuthorized as exc:
        raise NeedsAuthorization(login, str(exc)) from None
    return gh.UserToken(value, expires or FAR_FUTURE)
