"""A job page while the job runs: GET /jobs/<id>/events, a server-sent event stream fed by
the worker through Redis pub/sub (so any web process can serve it), and POST
/jobs/<id>/cancel, which cancels a running job as `/agent cancel` does, with its permission
check (the person who asked, or someone with the trigger permission) and a CSRF token."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

from flask import Blueprint, Response, abort, redirect
from sqlalchemy import select
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from app.core.jobevents import JobEvent
from app.policy.org_config import OrgConfigLoader
from app.policy.repo_config import PERMISSION_RANK, ConfigError, parse_repo_config
from app.store import audit
from app.store.cancel import cancel_live
from app.store.db import Database
from app.store.models import LIVE_STATES, Job, JobState, RepoConfigCache
from app.web.pages.jobs import (
    check_form,
    error_page,
    pages_or_503,
    signed_in,
    to_sign_in,
    visible_job,
)
from app.web.pages.session import Session
from app.web.pages.state import Pages

bp = Blueprint("pages_live", __name__)
bp.register_error_handler(HTTPException, error_page)
KEEPALIVE_SECONDS = 15.0  # a comment line this often keeps proxies from closing the stream
STREAM_SECONDS = 300.0  # then the stream ends and the browser reconnects (a web thread back)
STRICTEST = "admin"  # an unusable config: only admins may (as tasks/blueprints/gate.py)
_ORG = OrgConfigLoader()
_GONE = object()


def _state(db: Database, job_id: int) -> str | None:
    with db.read() as s:
        return s.scalar(select(Job.state).where(Job.id == job_id))


def _event(name: str, data: dict[str, object]) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def stream(pages: Pages, job_id: int) -> Iterator[str]:
    """The job's events as SSE: its state first, then each change, until it ends."""
    events = pages.events.listen(job_id, every=KEEPALIVE_SECONDS)  # subscribed before the read
    try:
        state = _state(pages.db, job_id)
        yield "retry: 3000\n\n"
        yield _event("state", {"state": state})
        ends = time.monotonic() + STREAM_SECONDS
        while state in LIVE_STATES and time.monotonic() < ends:
            message = next(events, _GONE)
            if message is _GONE:  # Redis went away: the page polls
                return
            if not isinstance(message, dict):
                yield ": keep-alive\n\n"
                continue
            name = str(message.get("event", ""))
            if name == JobEvent.STATE:
                state = _state(pages.db, job_id)
                yield _event("state", {"state": state})
            elif name in set(JobEvent):
                yield _event(name, {})
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


@bp.get("/jobs/<int:job_id>/events")
def events(job_id: int) -> BaseResponse:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        abort(401, "Sign in first.")
    visible_job(pages, session, job_id)
    if not pages.streams.acquire(blocking=False):
        abort(503, "Too many live pages at once here: this one polls.")
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            pages.streams.release()

    response = Response(stream(pages, job_id), mimetype="text/event-stream")
    response.call_on_close(release)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return response


def required_permission(pages: Pages, repo: str) -> str:
    """The `trigger_permission` in effect for `repo`: its last config read by the worker
    within the organisation's; the strictest when either cannot be used."""
    with pages.db.read() as s:
        text = s.scalar(select(RepoConfigCache.text).where(RepoConfigCache.repo == repo))
    try:
        config, _ = parse_repo_config(text)
        return _ORG.effective(pages.settings, config).trigger_permission
    except ConfigError:
        return STRICTEST


def may_cancel(pages: Pages, session: Session, job: Job) -> bool:
    """As `/agent cancel`: the person who asked, or anyone with the trigger permission."""
    if job.requested_by_id is not None:
        if job.requested_by_id == session.user_id:
            return True
    elif job.requested_by.lower() == session.login.lower():
        return True
    required = required_permission(pages, job.repo)
    role = pages.access.role(session, job.repo)
    return PERMISSION_RANK.get(role, -1) >= PERMISSION_RANK[required]


@bp.post("/jobs/<int:job_id>/cancel")
def cancel(job_id: int) -> BaseResponse:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in(f"/jobs/{job_id}")
    job = visible_job(pages, session, job_id)
    check_form(session, "press Cancel again")
    if job.state != JobState.RUNNING:
        abort(409, f"Job #{job.id} is {job.state}: only a running job can be cancelled here.")
    if not may_cancel(pages, session, job):
        abort(
            403,
            "Only the person who asked, or someone with the repository's trigger "
            f"permission ({required_permission(pages, job.repo)}), may cancel this job.",
        )
    reason = f"cancelled by @{session.login}"
    if cancel_live(pages.db, job.id, reason):
        audit.record(
            pages.db,
            audit.JOB_CANCEL,
            repo=job.repo,
            job_id=job.id,
            actor=session.login,
            detail={"reason": reason, "from": "job page"},
        )
        pages.events.publish(job.id, JobEvent.STATE)
    return redirect(f"/jobs/{job.id}", code=303)
