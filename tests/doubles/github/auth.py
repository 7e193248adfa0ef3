"""Credentials as GitHub checks them: app JWTs, installation and user tokens, repo permissions."""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING

import jwt

from tests.doubles.github.api import ApiError, not_found
from tests.doubles.github.model import ANONYMOUS, Identity, Installation, Repo, role_at_least

if TYPE_CHECKING:
    from tests.doubles.github.state import State

LEVELS = {"read": 1, "write": 2, "admin": 3}
NOT_ACCESSIBLE = "Resource not accessible by integration"


def bad_credentials() -> ApiError:
    return ApiError(401, "Bad credentials")


def verify_jwt(state: State, token: str) -> Identity:
    """An app JWT signed with the app's key, issued in the past, expiring within 10 minutes."""
    app = state.app
    try:
        claims = jwt.decode(
            token,
            app.public_key_pem,
            algorithms=["RS256"],
            options={"require": ["iat", "exp", "iss"], "verify_iat": False},
        )
    except jwt.ExpiredSignatureError as exc:
        raise ApiError(
            401,
            "'Expiration time' claim ('exp') must be a numeric value "
            "representing the future time at which the assertion expires",
        ) from exc
    except jwt.PyJWTError as exc:
        raise ApiError(401, "A JSON web token could not be decoded") from exc
    now = time.time()
    if not isinstance(claims["iat"], int | float) or claims["iat"] > now + 1:
        raise ApiError(
            401,
            "'Issued at' claim ('iat') must be an Integer representing the time "
            "that the assertion was issued",
        )
    if claims["exp"] - now > 600 + 1:
        raise ApiError(401, "'Expiration time' claim ('exp') is too far in the future")
    if str(claims["iss"]) != str(app.id):
        raise ApiError(401, "'Issuer' claim ('iss') must be an Integer or String of the App ID")
    return Identity("app", login=app.bot_login, app_id=app.id)


def credential(headers: dict[str, str]) -> tuple[str, str | None] | None:
    """(secret, basic-auth username or None) from an Authorization header."""
    value = headers.get("authorization", "").strip()
    if not value:
        return None
    scheme, _, rest = value.partition(" ")
    scheme = scheme.lower()
    if scheme in ("bearer", "token"):
        return rest.strip(), None
    if scheme == "basic":
        try:
            user, _, password = base64.b64decode(rest.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise bad_credentials() from exc
        return password, user
    raise bad_credentials()


def identify(state: State, headers: dict[str, str], allow_jwt: bool = True) -> Identity:
    """Who the request's credentials belong to; 401 for bad, expired or unknown credentials."""
    cred = credential(headers)
    if cred is None:
        return ANONYMOUS
    secret, _user = cred
    if secret.count(".") == 2 and allow_jwt:
        return verify_jwt(state, secret)
    token = state.tokens.get(secret)
    if token is None or token.expires_at <= state.now():
        raise bad_credentials()
    return Identity(
        token.kind,
        login=token.login,
        installation_id=token.installation_id,
        app_id=state.app.id if token.kind == "installation" else None,
        token=token,
    )


def covers(inst: Installation, repo: Repo) -> bool:
    if inst.suspended or inst.account.lower() != repo.owner.lower():
        return False
    return inst.repositories is None or repo.full_name.lower() in inst.repositories


def permission_ok(perms: dict[str, str], category: str, level: str) -> bool:
    have = perms.get(category)
    if category == "metadata" and level == "read" and perms:
        return True  # every installation can read metadata
    return have is not None and LEVELS[have] >= LEVELS[level]


def user_role(state: State, repo: Repo, login: str) -> str | None:
    """The user's role on the repo: collaborator role, owner admin, or read on public repos."""
    role = repo.collaborators.get(login.lower())
    if role is None and repo.owner.lower() == login.lower():
        role = "admin"
    if role is None and not repo.private:
        role = "read"
    return role


def installation_perms(state: State, ident: Identity, repo: Repo) -> dict[str, str]:
    """The app permissions behind `ident` on `repo`; 404 when the repo is out of its reach."""
    if ident.kind == "installation":
        inst = state.installations.get(ident.installation_id or 0)
        token = ident.token
        if inst is None or not covers(inst, repo):
            raise not_found()
        if (
            token
            and token.repositories is not None
            and repo.full_name.lower() not in token.repositories
        ):
            raise not_found()
        return dict(
            token.permissions if token and token.permissions is not None else inst.permissions
        )
    inst = state.installation_for(repo)
    if inst is None:
        if repo.private:
            raise not_found()
        return {"metadata": "read", "contents": "read"}
    return dict(inst.permissions)


def authorize(
    state: State, ident: Identity, repo: Repo, category: str, level: str, role: str | None = None
) -> None:
    """Raise as GitHub does unless `ident` may do a `level` `category` action on `repo`.

    `role` is the collaborator role a user needs (default: read for read, write for write).
    """
    needed = role or ("read" if level == "read" else "write")
    if ident.kind == "none":
        if repo.private:
            raise not_found()
        if level != "read":
            raise ApiError(401, "Requires authentication")
        return
    if ident.kind == "app":
        raise ApiError(403, NOT_ACCESSIBLE)
    if ident.kind == "user":
        got = user_role(state, repo, ident.login or "")
        if got is None:
            raise not_found()
    perms = installation_perms(state, ident, repo)
    if not permission_ok(perms, category, level):
        raise ApiError(403, NOT_ACCESSIBLE)
    if ident.kind == "user" and not role_at_least(got, needed):
        raise ApiError(403, f"Must have {needed} access to repository {repo.full_name}")


def require_app(ident: Identity) -> None:
    if ident.kind != "app":
        raise ApiError(401, "A JSON web token could not be decoded")


def require_user(ident: Identity) -> None:
    if ident.kind == "none":
        raise ApiError(401, "Requires authentication")
    if ident.kind != "user":
        raise ApiError(403, NOT_ACCESSIBLE)
