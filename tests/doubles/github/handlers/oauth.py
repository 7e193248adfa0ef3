"""The web side of user authorisation: /login/oauth/authorize and /login/oauth/access_token."""

from __future__ import annotations

import json
import urllib.parse
from html import escape
from typing import Any

from tests.doubles.github.api import Ctx, Response
from tests.doubles.github.oauth import ACCESS_TTL, REFRESH_TTL, TokenRequest, callback_matches

TROUBLESHOOTING = (
    "https://docs.github.com/apps/managing-oauth-apps/"
    "troubleshooting-oauth-app-access-token-request-errors/"
)
ERRORS = {
    "incorrect_client_credentials": "The client_id and/or client_secret passed are incorrect.",
    "redirect_uri_mismatch": "The redirect_uri MUST match the registered callback URL for "
    "this application.",
    "bad_verification_code": "The code passed is incorrect or expired.",
    "bad_refresh_token": "The refresh token passed is incorrect or expired.",
    "unsupported_grant_type": "The grant type is not supported.",
}


def _page(status: int, title: str) -> Response:
    html = f"<!doctype html><title>{escape(title)}</title><h1>{escape(title)}</h1>"
    return Response(status, html.encode(), {"Content-Type": "text/html; charset=utf-8"})


def _with_query(url: str, params: dict[str, str]) -> str:
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)


def _redirect(url: str) -> Response:
    return Response(302, b"", {"Location": url})


def authorize(ctx: Ctx) -> Response:
    """GET /login/oauth/authorize: the signed-in user (`state.oauth.user`) approves at once and
    is sent back to `redirect_uri` with a single-use `code` and the same `state`."""
    oauth, app = ctx.state.oauth, ctx.state.app
    if ctx.arg("client_id") != app.client_id:
        return _page(404, "Not Found")  # GitHub shows its 404 page for an unknown client
    registered = oauth.callbacks
    redirect_uri = ctx.arg("redirect_uri") or (registered[0] if registered else "")
    echo = {"state": ctx.arg("state") or ""} if ctx.arg("state") is not None else {}
    if not any(callback_matches(redirect_uri, r) for r in registered):
        if not registered:
            return _page(400, "The application has no callback URL")
        # An unregistered redirect_uri sends the person to the registered callback instead
        # (https://docs.github.com/en/apps/oauth-apps/maintaining-oauth-apps/troubleshooting-authorization-request-errors).
        error = {
            "error": "redirect_uri_mismatch",
            "error_description": ERRORS["redirect_uri_mismatch"],
        }
        return _redirect(_with_query(registered[0], error | echo))
    if oauth.user is None:
        return _page(200, "Sign in to GitHub")  # nobody is signed in: the login form
    code = oauth.new_code(oauth.user, redirect_uri)
    return _redirect(_with_query(redirect_uri, {"code": code} | echo))


def _fields(ctx: Ctx) -> dict[str, str]:
    """Parameters from the query string, a form body or a JSON body (GitHub takes all three)."""
    out = {k: v[0] for k, v in ctx.query.items() if v}
    if not ctx.raw_body:
        return out
    if "json" in ctx.headers.get("content-type", ""):
        data = json.loads(ctx.raw_body)
        out.update({k: str(v) for k, v in data.items()} if isinstance(data, dict) else {})
    else:
        parsed = urllib.parse.parse_qs(ctx.raw_body.decode(), keep_blank_values=True)
        out.update({k: v[0] for k, v in parsed.items() if v})
    return out


def _answer(ctx: Ctx, body: dict[str, Any]) -> Response:
    """JSON when asked for (Accept: application/json), form-encoded otherwise, as GitHub does."""
    if "json" in ctx.headers.get("accept", ""):
        return Response(200, body)
    text = urllib.parse.urlencode({k: str(v) for k, v in body.items()})
    return Response(200, text.encode(), {"Content-Type": "application/x-www-form-urlencoded"})


def _error(ctx: Ctx, grant: str, code: str) -> Response:
    ctx.state.oauth.requests.append(TokenRequest(grant, None, code))
    # Errors come with HTTP 200 and an `error` field, not an error status.
    anchor = code.replace("_", "-")
    body = {"error": code, "error_description": ERRORS[code], "error_uri": TROUBLESHOOTING + anchor}
    return _answer(ctx, body)


def _tokens(ctx: Ctx, grant: str, login: str, access: str, refresh: str) -> Response:
    ctx.state.oauth.requests.append(TokenRequest(grant, login))
    return _answer(
        ctx,
        {
            "access_token": access,
            "expires_in": ACCESS_TTL,
            "refresh_token": refresh,
            "refresh_token_expires_in": REFRESH_TTL,
            "token_type": "bearer",
            "scope": "",
        },
    )


def access_token(ctx: Ctx) -> Response:
    """POST /login/oauth/access_token: a code for a token pair, or a refresh token for a new
    pair (the old refresh and access tokens stop working)."""
    state, oauth, app = ctx.state, ctx.state.oauth, ctx.state.app
    fields = _fields(ctx)
    grant = fields.get("grant_type") or "authorization_code"
    if fields.get("client_id") != app.client_id or fields.get("client_secret") != (
        app.client_secret
    ):
        return _error(ctx, grant, "incorrect_client_credentials")
    if grant == "refresh_token":
        rotated = oauth.rotate(fields.get("refresh_token", ""))
        if rotated is None:
            return _error(ctx, grant, "bad_refresh_token")
        return _tokens(ctx, grant, *rotated)
    if grant != "authorization_code":
        return _error(ctx, grant, "unsupported_grant_type")
    code = oauth.codes.get(fields.get("code", ""))
    if code is None or code.used or code.expires_at <= state.now():
        return _error(ctx, grant, "bad_verification_code")
    if fields.get("redirect_uri") and fields["redirect_uri"] != code.redirect_uri:
        return _error(ctx, grant, "redirect_uri_mismatch")
    code.used = True
    return _tokens(ctx, grant, code.login, *oauth.grant(code.login))
