"""The one place that makes GitHub clients: app JWTs, installation and user tokens, deliveries.

Every REST call goes through PyGithub at `settings.github_api_url`. Tokens travel only in the
Authorization header: never in URLs, logs, reprs or exception messages made here.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from github import Auth, Github, GithubIntegration
from github.GithubException import GithubException, RateLimitExceededException

from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.core.timeutil import parse_time
from app.github.app_key import AppKey
from app.github.transport import RateLimitRetry, Who, instrument
from app.github.write_slots import WriteSlots

GIT_USERNAME = "x-access-token"  # git over HTTPS: this user, the token as password
USER_AGENT = "onloop"
JWT_LIFETIME = 540  # seconds; GitHub refuses more than 600
JWT_BACKDATE = 60  # seconds; allows for clock drift
MAX_DELIVERY_PAGES = 100
# PyGithub's pacing, as GitHub asks of integrations; off when settings.github_pacing is False.
SECONDS_BETWEEN_REQUESTS = 0.25
SECONDS_BETWEEN_WRITES = 1.0


def _pacing(settings: Settings) -> tuple[float, float]:
    """(seconds between requests, seconds between writes) for PyGithub."""
    if not settings.github_pacing:
        return 0.0, 0.0
    return SECONDS_BETWEEN_REQUESTS, SECONDS_BETWEEN_WRITES


@dataclass(frozen=True)
class _Token:
    _value: str = field(repr=False)
    expires_at: datetime

    def secret(self) -> str:
        """The token itself, for an Authorization header or a git credential helper only."""
        return self._value

    def expires_within(
        self, margin: timedelta = timedelta(minutes=5), now: datetime | None = None
    ) -> bool:
        """Whether the token is expired, or will be within `margin` (refresh it then)."""
        return self.expires_at - margin <= (now or datetime.now(UTC))


@dataclass(frozen=True, kw_only=True)
class InstallationToken(_Token):
    """A `ghs_` token acting as the app's installation (the `<slug>[bot]` user)."""

    installation_id: int
    permissions: Mapping[str, str] = field(default_factory=dict)
    repositories: tuple[str, ...] | None = None  # the names it was narrowed to, if any


@dataclass(frozen=True)
class UserToken(_Token):
    """A `ghu_` user-to-server token acting as the person who authorised onloop."""

    login: str | None = field(default=None, kw_only=True)  # whose token: audit, write lock


class AppNotConfigured(ValueError):
    """No GitHub App is configured (the documented `onloop dev` state): nothing can reach
    GitHub as the App, and the fix is the operator's, not the job's."""

    MESSAGE = "GitHub App not configured: run `onloop setup`"

    def __init__(self, missing: str) -> None:
        super().__init__(f"{self.MESSAGE} ({missing} is not set)")
        self.missing = missing


def _settings_value(value: Any, name: str) -> Any:
    if value in (None, ""):
        raise AppNotConfigured(f"ONLOOP_{name.upper()}")
    return value


class InstallationUnavailable(GithubException):
    """GitHub refused the installation a token (401, 403 or 404): the App was uninstalled
    or suspended there (or its credentials no longer match), so nothing can act for it."""

    def __init__(self, installation_id: int, cause: GithubException) -> None:
        super().__init__(cause.status, cause.data, cause.headers)
        self.installation_id = installation_id


def installation_who(bot_login: str, installation_id: int) -> Who:
    return Who("installation", bot_login, f"installation:{int(installation_id)}")


def _next_cursor(headers: Mapping[str, Any]) -> str | None:
    link = next((str(v) for k, v in headers.items() if k.lower() == "link"), "")
    for part in link.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            query = urllib.parse.urlsplit(url.strip().strip("<>")).query
            cursor = urllib.parse.parse_qs(query).get("cursor")
            return cursor[0] if cursor else None
    return None


class GitHubApp:
    """The App's way into GitHub for one process: every client it makes bounds its writes
    through `write_slots` and counts its calls on `meter`. The worker builds one and shares
    it (the web calls no GitHub API); `for_settings` is for one-shot commands and tests."""

    def __init__(self, settings: Settings, write_slots: WriteSlots, meter: Telemetry) -> None:
        self.settings, self.write_slots, self.meter = settings, write_slots, meter
        self._key: AppKey | None = None  # made at the first JWT, once the App is configured

    def _app_key(self) -> AppKey:
        path = str(_settings_value(self.settings.private_key_path, "private_key_path"))
        if self._key is None or str(self._key.path) != path:
            self._key = AppKey(path)
        return self._key

    @property
    def configured(self) -> bool:
        """Whether there is an App to act as (its id and private key are set)."""
        return self.settings.app_id is not None and bool(self.settings.private_key_path)

    @classmethod
    def for_settings(cls, settings: Settings) -> GitHubApp:
        """A GitHubApp with write slots and a metrics writer of its own."""
        return cls(settings, WriteSlots.for_settings(settings), Telemetry(settings.redis_url))

    def app_auth(self) -> Auth.AppAuth:
        """The App's JWTs: RS256, issued 60 s ago, valid for 9 minutes, signed with the key
        parsed once (app_key.py)."""
        return Auth.AppAuth(
            str(_settings_value(self.settings.app_id, "app_id")),
            sign_func=self._app_key().sign,
            jwt_expiry=JWT_LIFETIME,
            jwt_issued_at=-JWT_BACKDATE,
        )

    def app_integration(self) -> GithubIntegration:
        """PyGithub's client authenticated as the App (JWT), for /app endpoints."""
        settings = self.settings
        auth = self.app_auth()
        between, writes = _pacing(settings)
        gi = GithubIntegration(
            auth=auth,
            base_url=settings.github_api_url,
            user_agent=USER_AGENT,
            retry=RateLimitRetry(),
            seconds_between_requests=between,
            seconds_between_writes=writes,
        )
        who = Who("app", f"app:{settings.app_id}", f"app:{settings.app_id}")
        instrument(gi.requester, who, self.write_slots, self.meter)
        return gi

    def installation_token(
        self,
        installation_id: int,
        *,
        repositories: list[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> InstallationToken:
        """POST /app/installations/{id}/access_tokens, narrowed to `repositories` (names, or
        owner/name) and `permissions` when given. Raises github.GithubException on refusal,
        InstallationUnavailable when the installation is gone or suspended."""
        body: dict[str, Any] = {}
        names = [r.rsplit("/", 1)[-1] for r in repositories] if repositories is not None else None
        if names is not None:
            body["repositories"] = names
        if permissions is not None:
            body["permissions"] = dict(permissions)
        with self.app_integration() as gi:
            try:
                _, data = gi.requester.requestJsonAndCheck(
                    "POST", f"/app/installations/{int(installation_id)}/access_tokens", input=body
                )
            except RateLimitExceededException:
                raise  # a 403 too, but the installation is fine: the job waits or is retried
            except GithubException as exc:
                if exc.status in (401, 403, 404):
                    raise InstallationUnavailable(int(installation_id), exc) from exc
                raise
        return InstallationToken(
            data["token"],
            parse_time(data["expires_at"]),
            installation_id=int(installation_id),
            permissions=dict(data.get("permissions") or {}),
            repositories=tuple(names) if names is not None else None,
        )

    def _client(self, secret: str, who: Who) -> Github:
        """PyGithub with onloop's retry (Retry-After, x-ratelimit-reset) and its writes
        bounded per `who.lock_key` and reported to observers (app.github.transport)."""
        between, writes = _pacing(self.settings)
        client = Github(
            auth=Auth.Token(secret),
            base_url=self.settings.github_api_url,
            user_agent=USER_AGENT,
            per_page=100,
            retry=RateLimitRetry(),
            seconds_between_requests=between,
            seconds_between_writes=writes,
        )
        instrument(client.requester, who, self.write_slots, self.meter)
        return client

    def installation_client(self, token: InstallationToken) -> Github:
        """PyGithub acting as the installation (comments from `<slug>[bot]`)."""
        if not isinstance(token, InstallationToken):
            raise TypeError("installation_client needs an InstallationToken")
        bot = self.settings.bot_login or "installation"
        return self._client(token.secret(), installation_who(bot, token.installation_id))

    def user_client(self, token: UserToken) -> Github:
        """PyGithub acting as the user who triggered the work (their PRs, pushes, reviews)."""
        if not isinstance(token, UserToken):
            raise TypeError("user_client needs a UserToken")
        if token.login:
            who = Who("user", token.login, f"user:{token.login.lower()}")
        else:  # serialise per token without keeping it: a short digest names the lock
            digest = hashlib.sha256(token.secret().encode()).hexdigest()[:16]
            who = Who("user", "unknown-user", f"user-token:{digest}")
        return self._client(token.secret(), who)

    def list_hook_deliveries(self, since: datetime) -> list[dict[str, Any]]:
        """The App's webhook deliveries at or after `since`, newest first (GET
        /app/hook/deliveries).

        Each dict is GitHub's summary of one delivery attempt (id, guid, delivered_at,
        status_code, event, action, redelivery, ...) with `delivered_at` parsed to an aware
        datetime: `id` is the attempt's (onloop calls it `hook_attempt_id`), `guid` the
        X-GitHub-Delivery one all attempts at a delivery share (`delivery_guid`)."""
        since = since if since.tzinfo else since.replace(tzinfo=UTC)
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        with self.app_integration() as gi:
            for _ in range(MAX_DELIVERY_PAGES):
                params: dict[str, Any] = {"per_page": 100}
                if cursor:
                    params["cursor"] = cursor
                headers, data = gi.requester.requestJsonAndCheck(
                    "GET", "/app/hook/deliveries", parameters=params
                )
                older = False
                for item in data or []:
                    delivered = parse_time(item["delivered_at"])
                    if delivered < since:
                        older = True
                        continue
                    out.append({**item, "delivered_at": delivered})
                cursor = _next_cursor(headers)
                if older or not cursor:
                    break
        return out

    def redeliver(self, hook_attempt_id: int) -> None:
        """Ask GitHub to send a delivery again (POST /app/hook/deliveries/{id}/attempts),
        named by the `id` of one of its attempts in `list_hook_deliveries`."""
        with self.app_integration() as gi:
            gi.requester.requestJsonAndCheck(
                "POST", f"/app/hook/deliveries/{int(hook_attempt_id)}/attempts"
            )

    def app_slug(self) -> str:
        """GET /app with the App's JWT: proves GitHub accepts the key; returns the App's slug."""
        return self.app_info()[0]

    def app_info(self) -> tuple[str, list[str]]:
        """GET /app with the App's JWT: its slug and the webhook events it subscribes to
        (https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app)."""
        with self.app_integration() as gi:
            _, data = gi.requester.requestJsonAndCheck("GET", "/app")
        events = data.get("events")
        return str(data["slug"]), [str(e) for e in events] if isinstance(events, list) else []
