"""Who may see a job's page: operators named in `dashboard.operators` see every job; anyone
else sees the jobs of repositories they can read, checked with their own token (GET
/repos/{owner}/{repo}) and remembered in Redis for ONLOOP_DASHBOARD_ACCESS_MINUTES."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import redis
import requests
from github import Github, GithubException

from app.core.settings import Settings
from app.github.clients import GitHubApp, UserToken
from app.github.user_tokens import NotAuthorized, access_token
from app.policy.dashboard import operators
from app.store.db import Database
from app.web.pages.session import Session

log = logging.getLogger(__name__)
KEY = "onloop:pages:access:{user}:{repo}"
# The person's permissions on a repository, as GET /repos/{owner}/{repo} returns them for
# their token (https://docs.github.com/en/rest/repos/repos#get-a-repository), to roles.
_ROLES = (("admin", "admin"), ("maintain", "maintain"), ("push", "write"), ("triage", "triage"))


class Access(StrEnum):
    """The answer for one person and one repository."""

    OPERATOR = "operator"  # named in dashboard.operators: every job
    READER = "reader"  # their token reads the repository
    NONE = "none"  # neither (or their token is gone): the page is a 404


class AccessCheck:
    """Answers `may this person see this repository's jobs`, caching per person and repo."""

    def __init__(
        self, settings: Settings, db: Database, github: GitHubApp, client: redis.Redis
    ) -> None:
        self.settings, self.db, self.github, self.client = settings, db, github, client
        self.seconds = settings.dashboard_access_minutes * 60

    def of(self, session: Session, repo: str) -> Access:
        if self.is_operator(session):
            return Access.OPERATOR
        key = KEY.format(user=session.user_id, repo=repo.lower())
        cached = self._get(key)
        if cached is not None:
            return Access(cached)
        answer = self._ask(session, repo)
        if answer is not None:
            self._set(key, answer)
        return answer or Access.NONE

    def is_operator(self, session: Session) -> bool:
        """Named by login in `dashboard.operators` (case-insensitive, as GitHub logins are).
        An `org/team` entry is a team membership, asked with the person's own token."""
        listed = operators(self.settings)
        logins = {name.lower() for name in listed if "/" not in name}
        if session.login.lower() in logins:
            return True
        teams = [name for name in listed if "/" in name]
        if not teams:
            return False
        key = KEY.format(user=session.user_id, repo="@operator")
        cached = self._get(key)
        if cached is not None:
            return cached == Access.OPERATOR
        member = any(self._in_team(session, team) for team in teams)
        self._set(key, Access.OPERATOR if member else Access.NONE)
        return member

    def role(self, session: Session, repo: str) -> str:
        """The person's role on `repo` (read ... admin), asked now with their own token;
        "none" when their token cannot read it or GitHub does not answer."""
        gh = self._client(session)
        if gh is None:
            return "none"
        try:
            perms = gh.get_repo(repo).permissions
        except (GithubException, requests.RequestException):
            return "none"
        for attribute, name in _ROLES:
            if getattr(perms, attribute, False):
                return name
        return "read" if getattr(perms, "pull", False) else "none"

    def _ask(self, session: Session, repo: str) -> Access | None:
        """READER or NONE from GitHub; None when GitHub could not be asked (not cached)."""
        gh = self._client(session)
        if gh is None:
            return Access.NONE
        try:
            gh.get_repo(repo)  # GET /repos/{owner}/{repo}: the Github client is not lazy
        except GithubException as exc:
            if exc.status in (401, 403, 404):
                return Access.NONE
            log.warning("repository access not known: GitHub answered %s", exc.status)
            return None
        except requests.RequestException as exc:
            log.warning("repository access not known: %s", type(exc).__name__)
            return None
        return Access.READER

    def _in_team(self, session: Session, team: str) -> bool:
        # GET /orgs/{org}/teams/{team_slug}/memberships/{username}: 404 unless a member
        # (https://docs.github.com/en/rest/teams/members#get-team-membership-for-a-user).
        org, slug = team.split("/", 1)
        gh = self._client(session)
        if gh is None:
            return False
        path = f"/orgs/{org}/teams/{slug}/memberships/{session.login}"
        try:
            _, data = gh.requester.requestJsonAndCheck("GET", path)
        except (GithubException, requests.RequestException):
            return False
        return isinstance(data, dict) and data.get("state") == "active"

    def _client(self, session: Session) -> Github | None:
        try:
            token, expires = access_token(self.db, self.settings, session.user_id)
        except NotAuthorized:
            return None
        expiry = expires or datetime.now(UTC) + timedelta(hours=1)
        return self.github.user_client(UserToken(token, expiry, login=session.login))

    def _get(self, key: str) -> str | None:
        try:
            raw = self.client.get(key)
        except redis.RedisError:
            return None
        return raw.decode() if isinstance(raw, bytes) else None

    def _set(self, key: str, answer: Access) -> None:
        try:
            self.client.set(key, str(answer), ex=self.seconds)
        except redis.RedisError:
            log.info("repository access not cached: Redis unavailable")
