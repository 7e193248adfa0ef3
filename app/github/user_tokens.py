"""People's GitHub user tokens: code exchange, encrypted storage, refresh under a lock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from app.core.crypto import TokenBox
from app.core.settings import Settings
from app.store.db import Database, rowcount
from app.store.models import UserAccount, aware, utcnow

REFRESH_MARGIN = timedelta(minutes=5)
TIMEOUT = 15


class OAuthError(Exception):
    """GitHub refused an exchange or refresh; `code` is GitHub's error code."""

    def __init__(self, code: str, description: str = "") -> None:
        super().__init__(f"{code}: {description}" if description else code)
        self.code = code


class NotAuthorized(Exception):
    """The person has not authorised onloop, or their authorisation can no longer be renewed."""


@dataclass(frozen=True)
class TokenPair:
    access_token: str
    access_expires_at: datetime | None
    refresh_token: str | None
    refresh_expires_at: datetime | None


def _token_request(settings: Settings, **fields: str) -> TokenPair:
    """POST {github}/login/oauth/access_token.

    GitHub answers errors here with 200 and an `error` field, not an HTTP error status
    (https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-oauth-app-access-token-request-errors).
    """
    secret = settings.client_secret.get_secret_value() if settings.client_secret else ""
    response = requests.post(
        settings.github_url.rstrip("/") + "/login/oauth/access_token",
        data={"client_id": settings.client_id or "", "client_secret": secret, **fields},
        headers={"Accept": "application/json"},
        timeout=TIMEOUT,
    )
    try:
        body = response.json()
    except ValueError:
        raise OAuthError("bad_response", f"HTTP {response.status_code}") from None
    if response.status_code >= 400 or "error" in body or "access_token" not in body:
        raise OAuthError(
            str(body.get("error", f"http_{response.status_code}")),
            str(body.get("error_description", "")),
        )
    now = utcnow()

    def expiry(key: str) -> datetime | None:
        return now + timedelta(seconds=int(body[key])) if body.get(key) else None

    return TokenPair(
        access_token=str(body["access_token"]),
        access_expires_at=expiry("expires_in"),
        refresh_token=body.get("refresh_token"),
        refresh_expires_at=expiry("refresh_token_expires_in"),
    )


def exchange_code(settings: Settings, code: str, redirect_uri: str) -> TokenPair:
    return _token_request(settings, code=code, redirect_uri=redirect_uri)


def refresh_pair(settings: Settings, refresh_token: str) -> TokenPair:
    return _token_request(settings, grant_type="refresh_token", refresh_token=refresh_token)


def fetch_user(settings: Settings, access_token: str) -> tuple[int, str]:
    """(id, login) of the token's owner, from GET /user."""
    response = requests.get(
        settings.github_api_url.rstrip("/") + "/user",
        headers={
            "Authorization": f"Bearer {access_token}",
            "Accept": "application/vnd.github+json",
        },
        timeout=TIMEOUT,
    )
    if response.status_code != 200:
        raise OAuthError("user_lookup_failed", f"HTTP {response.status_code}")
    body = response.json()
    return int(body["id"]), str(body["login"])


def store(db: Database, box: TokenBox, user_id: int, login: str, pair: TokenPair) -> None:
    """Save the pair encrypted; the old pair is replaced in the same transaction."""
    for attempt in range(2):  # two first sign-ins of one person at once: one insert loses
        try:
            with db.write_lock(), db.transaction() as s:
                # A login belongs to one account at a time: a row left by someone who
                # renamed themselves would otherwise answer for the new owner of the name.
                s.execute(
                    delete(UserAccount).where(UserAccount.login == login, UserAccount.id != user_id)
                )
                row = s.get(UserAccount, user_id, with_for_update=True)
                if row is None:
                    row = UserAccount(id=user_id, login=login)
                    s.add(row)
                row.login = login
                _seal(box, row, pair)
                row.authorized_at = utcnow()
            return
        except IntegrityError:
            if attempt:
                raise


def forget(db: Database, user_id: int) -> bool:
    """Delete a person's tokens (authorisation revoked); True when there were any."""
    with db.write_lock(), db.transaction() as s:
        return bool(rowcount(s.execute(delete(UserAccount).where(UserAccount.id == user_id))))


def access_token(
    db: Database,
    settings: Settings,
    user_id: int,
    *,
    margin: timedelta = REFRESH_MARGIN,
    rejected: str | None = None,
) -> tuple[str, datetime | None]:
    """A usable access token for `user_id`, refreshed first when it expires within `margin`.

    `rejected` is a token GitHub has just refused (401): unless another worker has replaced
    it already, it is refreshed now whatever its expiry says. Using a refresh token
    invalidates the old pair, so the refresh happens under the row's lock and re-reads the
    row: a second worker finds the new pair and does not refresh again. When GitHub refuses
    the refresh token (revoked, expired), the person's tokens are forgotten.
    """
    box = TokenBox(_secret_key(settings))
    row = _row(db, user_id)
    if row is None or row.access_token is None:
        raise NotAuthorized("you have not authorised it yet")
    if rejected is None and not _needs_refresh(row, margin):
        return _open(box, row.access_token), aware(row.access_expires_at)
    refused: str | None = None
    with db.write_lock(), db.transaction() as s:
        locked = s.get(UserAccount, user_id, with_for_update=True, populate_existing=True)
        if locked is None or locked.access_token is None:
            raise NotAuthorized("you have not authorised it yet")
        current = _open(box, locked.access_token)
        stale = current == rejected if rejected is not None else _needs_refresh(locked, margin)
        if not stale:
            return current, aware(locked.access_expires_at)
        refresh_expiry = aware(locked.refresh_expires_at)
        if locked.refresh_token is None or (refresh_expiry and refresh_expiry <= utcnow()):
            refused = "no refresh token" if locked.refresh_token is None else "expired"
            s.delete(locked)
        else:
            try:
                pair = refresh_pair(settings, _open(box, locked.refresh_token))
            except OAuthError as exc:
                if exc.code != "bad_refresh_token":
                    raise NotAuthorized(f"GitHub refused to renew your token: {exc.code}") from None
                refused = exc.code
                s.delete(locked)  # GitHub no longer knows this pair: nothing left to use
            else:
                _seal(box, locked, pair)
                return pair.access_token, pair.access_expires_at
    raise NotAuthorized(f"your authorisation has ended or was revoked ({refused})")


def find_user_id(db: Database, login: str) -> int | None:
    with db.read() as s:
        return s.scalar(select(UserAccount.id).where(UserAccount.login == login))


def _row(db: Database, user_id: int) -> UserAccount | None:
    with db.read() as s:
        return s.get(UserAccount, user_id)


def _needs_refresh(row: UserAccount, margin: timedelta = REFRESH_MARGIN) -> bool:
    expiry = aware(row.access_expires_at)
    return expiry is not None and expiry - margin <= utcnow()


def _seal(box: TokenBox, row: UserAccount, pair: TokenPair) -> None:
    row.access_token = box.seal(pair.access_token)
    row.access_expires_at = pair.access_expires_at
    row.refresh_token = box.seal(pair.refresh_token) if pair.refresh_token else None
    row.refresh_expires_at = pair.refresh_expires_at


def _open(box: TokenBox, sealed: str) -> str:
    value = box.open(sealed)
    if value is None:
        raise NotAuthorized("your stored token cannot be decrypted: ONLOOP_SECRET_KEY changed")
    return value


def _secret_key(settings: Settings) -> str:
    if settings.secret_key is None:
        raise NotAuthorized("ONLOOP_SECRET_KEY is not set, so no token can be used")
    return settings.secret_key.get_secret_value()
