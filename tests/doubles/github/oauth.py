"""OAuth for the GitHub App: the signed-in user, authorisation codes and expiring token pairs."""

from __future__ import annotations

import secrets
import string
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.doubles.github.state import State

# GitHub's lifetimes for expiring user tokens
# (https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens).
ACCESS_TTL = 8 * 3600
REFRESH_TTL = 15811200  # about six months
CODE_TTL = 600  # codes expire after 10 minutes and work once
DEFAULT_CALLBACK = "http://localhost:8000/oauth/callback"  # onloop's default public URL
ALPHABET = string.ascii_letters + string.digits


@dataclass
class Code:
    login: str
    redirect_uri: str
    expires_at: float
    used: bool = False


@dataclass
class RefreshGrant:
    login: str
    access_token: str = field(repr=False)
    expires_at: float


@dataclass(frozen=True)
class TokenRequest:
    """One POST /login/oauth/access_token as the double answered it."""

    grant_type: str  # "authorization_code" or "refresh_token"
    login: str | None  # whose tokens were issued; None when refused
    error: str | None = None


def callback_matches(redirect_uri: str, registered: str) -> bool:
    """GitHub's rule: same scheme, host and port; the path at or below the callback's
    (https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#redirect-urls)."""
    got, want = urllib.parse.urlsplit(redirect_uri), urllib.parse.urlsplit(registered)
    if (got.scheme, got.netloc) != (want.scheme, want.netloc):
        return False
    base = want.path.rstrip("/")
    return got.path == want.path or got.path.startswith(base + "/")


class OAuthState:
    """The double's OAuth world, `state.oauth`: who is signed in to its web pages, the app's
    registered callbacks, codes and refresh tokens. Access tokens live in `state.tokens`."""

    def __init__(self, state: State) -> None:
        self._state = state
        self.user: str | None = None  # who "signs in" at /login/oauth/authorize
        self.callbacks: list[str] = [DEFAULT_CALLBACK]  # the app's registered callback URLs
        self.codes: dict[str, Code] = {}
        self.refresh_tokens: dict[str, RefreshGrant] = {}
        self.requests: list[TokenRequest] = []

    @property
    def refreshes(self) -> list[TokenRequest]:
        """Successful refresh-token grants, oldest first."""
        return [r for r in self.requests if r.grant_type == "refresh_token" and not r.error]

    def register_callback(self, url: str) -> None:
        """Make `url` the app's (only) registered callback URL."""
        with self._state.lock:
            self.callbacks = [url]

    def new_code(self, login: str, redirect_uri: str) -> str:
        state = self._state
        with state.lock:
            state.user(login)
            code = secrets.token_hex(10)
            self.codes[code] = Code(login, redirect_uri, state.now() + CODE_TTL)
            return code

    def grant(self, login: str) -> tuple[str, str]:
        """A fresh (access, refresh) pair for `login`, as a code exchange hands out."""
        state = self._state
        with state.lock:
            access = state.issue_user_token(login, expires_in=ACCESS_TTL)
            refresh = "ghr_" + "".join(secrets.choice(ALPHABET) for _ in range(76))
            self.refresh_tokens[refresh] = RefreshGrant(
                state.user(login).login, access, state.now() + REFRESH_TTL
            )
            return access, refresh

    def rotate(self, refresh_token: str) -> tuple[str, str, str] | None:
        """Use a refresh token: the old pair stops working; (login, access, refresh) or None."""
        state = self._state
        with state.lock:
            grant = self.refresh_tokens.pop(refresh_token, None)
            if grant is None or grant.expires_at <= state.now():
                return None
            state.tokens.pop(grant.access_token, None)
            return (grant.login, *self.grant(grant.login))

    def expire_user_tokens(self, login: str) -> int:
        """Let `login`'s access tokens expire now (their refresh tokens keep working)."""
        state = self._state
        with state.lock:
            found = [t for t in state.tokens.values() if t.kind == "user" and _same(t.login, login)]
            for token in found:
                token.expires_at = state.now() - 1
            return len(found)

    def revoke(self, login: str) -> None:
        """The person revoked the app in their settings: every token of theirs dies. (GitHub
        then sends `github_app_authorization` revoked; a test delivers that itself.)"""
        state = self._state
        with state.lock:
            for value, token in list(state.tokens.items()):
                if token.kind == "user" and _same(token.login, login):
                    del state.tokens[value]
            for value, grant in list(self.refresh_tokens.items()):
                if _same(grant.login, login):
                    del self.refresh_tokens[value]


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()
