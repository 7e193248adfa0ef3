"""GET /jobs/<id>: a job's page, for people signed in with GitHub who may see its
repository (app/web/pages/access.py); anyone else gets the same 404 as for no such job."""

from __future__ import annotations

import secrets

import redis
from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    current_app,
    g,
    redirect,
    render_template,
    request,
)
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from app.store.models import Job, JobState
from app.web.pages.access import Access
from app.web.pages.session import COOKIE, Session
from app.web.pages.state import EXTENSION, Pages, build, pages_of
from app.web.pages.view import job_page
from app.web.state import onloop

bp = Blueprint(
    "pages",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/pages/static",
)
# No inline script or style anywhere: the pages' own files only
# (https://developer.mozilla.org/en-US/docs/Web/HTTP/Headers/Content-Security-Policy).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)


def init_app(app: Flask) -> None:
    """Register the pages on `app` (after app.web.state's Onloop is in place)."""
    from app.web.pages import (  # noqa: F401 - their routes use this module's helpers
        campaigns,
        insights,
        joblist,
        live,
        schedules,
    )

    state = onloop(app)
    app.extensions[EXTENSION] = build(state.settings, state.db, state.metrics.writer)
    app.register_blueprint(bp)
    app.register_blueprint(live.bp)
    app.register_blueprint(joblist.bp)


def pages_or_503() -> Pages:
    found = pages_of(current_app)
    if found is None:
        abort(503, "The job pages need Redis: set ONLOOP_REDIS_URL.")
    return found


def signed_in(pages: Pages) -> Session | None:
    """The session the request's cookie names, if it is still valid."""
    try:
        session = pages.sessions.load(request.cookies.get(COOKIE))
    except redis.RedisError:
        abort(503, "Sign-in sessions are unavailable (Redis does not answer).")
    g.pages_session = session  # for the header (app/web/pages/joblist.py)
    return session


def check_form(session: Session, again: str) -> None:
    """400 unless the posted form carries the session's CSRF token (the page's hidden field);
    the person is told to reload the page and do `again` (e.g. "press Cancel again")."""
    if not secrets.compare_digest(request.form.get("csrf", ""), session.csrf):
        abort(400, f"This form has expired: reload the page and {again}.")


def to_sign_in(back: str | None = None) -> BaseResponse:
    """To GitHub's sign-in, and back to this page (or `back`) afterwards."""
    return redirect("/oauth/login?next=" + (back or request.path))


def visible_job(pages: Pages, session: Session, job_id: int) -> Job:
    """Job `job_id` if `session`'s person may see it; 404 otherwise, the same as for a job
    that does not exist (a 403 would tell them the job and its repository exist)."""
    with pages.db.read() as s:
        job = s.get(Job, job_id)
        if job is not None:
            s.expunge(job)
    if job is None or pages.access.of(session, job.repo) == Access.NONE:
        abort(404, "No such job.")
    g.pages_repos = [job.repo]  # the header shows its installation
    return job


@bp.get("/jobs/<int:job_id>")
def job(job_id: int) -> BaseResponse | str:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in()
    found = visible_job(pages, session, job_id)
    page = job_page(pages.settings, pages.db, found)
    return render_template(
        "pages/job.html", job=page, session=session, cancellable=found.state == JobState.RUNNING
    )


@bp.after_app_request
def _headers(response: Response) -> Response:
    if request.blueprint in ("pages", "pages_live", "pages_list") or request.path.startswith(
        ("/jobs", "/pages/", "/campaigns")
    ):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers.setdefault("Cache-Control", "no-store")
    return response


@bp.errorhandler(HTTPException)
def error_page(exc: HTTPException) -> tuple[str, int]:
    code = exc.code or 500
    if request.path.endswith("/events"):  # an EventSource reads no page
        return exc.description or "", code
    return render_template("pages/error.html", code=code, text=exc.description), code
