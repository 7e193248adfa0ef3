"""GET /oauth/login and /oauth/callback: the GitHub App user-authorisation flow."""

from __future__ import annotations

import re
import secrets
from html import escape
from urllib.parse import urlencode

import redis
import requests
from flask import Blueprint, Response, current_app, redirect, request
from sqlalchemy import and_, or_, select, update
from werkzeug.wrappers import Response as BaseResponse

from app.core.crypto import StateSigner, TokenBox, set_nonce_cookie
from app.core.publicurl import oauth_callback_url
from app.github.user_tokens import OAuthError, exchange_code, fetch_user, store
from app.store.db import Database
from app.store.models import Job, JobState, Outbox
from app.web.pages.state import pages_of
from app.web.state import Onloop, onloop

bp = Blueprint("oauth", __name__)
COOKIE = "onloop_oauth"
# Where a sign-in may send the browser back to: one of onloop's own pages, never another site
# (`//host` and `/\\host` are other sites to a browser).
_NEXT = re.compile(r"^/(?:jobs|insights|campaigns|schedules)(?:/[A-Za-z0-9_.-]+)*/?$")


def safe_next(value: object) -> str | None:
    """`value` when it is a path of onloop's pages to come back to after signing in."""
    return value if isinstance(value, str) and _NEXT.match(value) else None


def _page(status: int, title: str, text: str) -> Response:
    html = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title></head>"
        f"<body><h1>{escape(title)}</h1><p>{text}</p></body></html>"
    )
    return Response(html, status=status, mimetype="text/html")


def _signer(state: Onloop) -> StateSigner:
    key = state.settings.secret_key
    if key is None:
        raise RuntimeError("ONLOOP_SECRET_KEY is not set")
    return StateSigner(key.get_secret_value())


def _redirect_uri(state: Onloop) -> str:
    return oauth_callback_url(state.settings.public_url)


def _configured(state: Onloop) -> bool:
    return bool(state.settings.client_id) and state.settings.secret_key is not None


NOT_CONFIGURED = "This onloop has no GitHub OAuth client configured."


@bp.get("/oauth/login")
def login() -> BaseResponse:
    state = onloop(current_app)
    if not _configured(state):
        return _page(503, "Not configured", NOT_CONFIGURED)
    nonce = secrets.token_urlsafe(16)
    back = safe_next(request.args.get("next"))
    signed = _signer(state).sign({"n": nonce, **({"next": back} if back else {})})
    query = urlencode(
        {
            "client_id": state.settings.client_id,
            "redirect_uri": _redirect_uri(state),
            "state": signed,
        }
    )
    response = redirect(state.settings.github_url.rstrip("/") + "/login/oauth/authorize?" + query)
    # The nonce ties the callback to this browser, so nobody can finish a flow they did not
    # start in it (login CSRF).
    set_nonce_cookie(
        response,
        COOKIE,
        nonce,
        max_age=_signer(state).max_age,
        public_url=state.settings.public_url,
        path="/oauth",
    )
    return response


@bp.get("/oauth/callback")
def callback() -> BaseResponse:
    state = onloop(current_app)
    if not _configured(state):
        return _page(503, "Not configured", NOT_CONFIGURED)
    again = "<a href='/oauth/login'>Start again</a>."
    data = _signer(state).verify(request.args.get("state", ""))
    if data is None:
        return _page(400, "Sign-in link expired or invalid", f"Nothing was stored. {again}")
    if not secrets.compare_digest(str(data.get("n", "")), request.cookies.get(COOKIE, "")):
        return _page(400, "Sign-in started elsewhere", f"Nothing was stored. {again}")
    code = request.args.get("code")
    if not code:
        reason = escape(request.args.get("error", "no code"))
        return _page(400, "GitHub did not authorise onloop", f"({reason}). {again}")
    try:
        pair = exchange_code(state.settings, code, _redirect_uri(state))
        user_id, login = fetch_user(state.settings, pair.access_token)
    except OAuthError as exc:
        return _page(400, "GitHub refused the sign-in", f"({escape(exc.code)}). {again}")
    except requests.RequestException as exc:
        state.log.warning("oauth exchange failed", error=type(exc).__name__)
        return _page(502, "GitHub could not be reached", f"Nothing was stored. {again}")
    assert state.settings.secret_key is not None
    store(state.db, TokenBox(state.settings.secret_key.get_secret_value()), user_id, login, pair)
    resumed = resume_jobs(state, user_id, login)
    state.log.info("user authorised", login=login, resumed=resumed)
    back = safe_next(data.get("next"))
    response: BaseResponse = (
        redirect(back)
        if back
        else _page(
            200,
            "onloop is authorised",
            f"Thanks @{escape(login)}: onloop can now act in your name."
            + (f" {len(resumed)} waiting job(s) resumed." if resumed else "")
            + " You can close this page.",
        )
    )
    _start_session(state, response, user_id, login)
    response.delete_cookie(COOKIE, path="/oauth")
    return response


def _start_session(state: Onloop, response: BaseResponse, user_id: int, login: str) -> None:
    """Signed in on onloop's pages too (their session cookie), when the pages are served."""
    pages = pages_of(current_app)
    if pages is None:
        return
    try:
        pages.sessions.set_cookie(response, pages.sessions.create(user_id, login))
    except redis.RedisError as exc:
        state.log.warning("page session not started", error=type(exc).__name__)


def resume_jobs(state: Onloop, user_id: int, login: str) -> list[int]:
    """Jobs waiting for this person's authorisation go back to the queue."""
    resumed = resume_waiting(state.db, user_id, login)
    if resumed:  # committed: the dispatcher need not wait for its next poll
        state.bell.ring()
    return resumed


def resume_waiting(db: Database, user_id: int, login: str) -> list[int]:
    """Jobs waiting for this person's authorisation go back to the queue: theirs by id, or
    by login for a job that knows no id (a login can change hands, an id cannot)."""
    person = or_(
        Job.requested_by_id == user_id,
        and_(Job.requested_by_id.is_(None), Job.requested_by == login),
    )
    with db.write_lock(), db.transaction() as s:
        ids = list(
            s.scalars(
                select(Job.id)
                .where(Job.state == JobState.WAITING_FOR_AUTHORIZATION, person)
                .with_for_update()
            )
        )
        if ids:
            s.execute(
                update(Job)
                .where(Job.id.in_(ids), Job.state == JobState.WAITING_FOR_AUTHORIZATION)
                .values(state=JobState.QUEUED)
            )
            s.add_all(Outbox(job_id=i) for i in ids)
        return ids
