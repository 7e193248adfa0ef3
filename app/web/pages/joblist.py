"""GET /jobs: every job the signed-in person may see, newest first, a page at a time, filtered
by repository, kind, state, person and dates; and the header every page carries."""

from __future__ import annotations

from flask import Blueprint, abort, current_app, g, render_template, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from app.store.models import JobState
from app.web.pages.header import header
from app.web.pages.jobs import error_page, pages_or_503, signed_in, to_sign_in
from app.web.pages.listing import BadFilter, Filters, listing
from app.web.pages.state import pages_of
from app.web.state import onloop

bp = Blueprint("pages_list", __name__)
bp.register_error_handler(HTTPException, error_page)


@bp.get("/jobs")
def jobs() -> BaseResponse | str:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in()
    kinds = tuple(sorted(onloop(current_app).kinds))
    try:
        filters = Filters.parse(request.args, kinds)
    except BadFilter as exc:
        abort(400, str(exc))
    found = listing(pages.settings, pages.db, pages.access, session, filters)
    g.pages_repos = found.repos  # the header shows the installations that own them
    return render_template(
        "pages/jobs.html",
        listing=found,
        filters=filters,
        kinds=kinds,
        states=[str(state) for state in JobState],
        session=session,
    )


@bp.app_context_processor
def _header() -> dict[str, object]:
    """`header` for every page rendered for a signed-in person (app/web/pages/header.py).
    A view sets `g.pages_repos` to the repositories the page shows them; without it, an
    operator's header shows every installation and anyone else's none."""
    session = g.get("pages_session")
    pages = pages_of(current_app)
    if session is None or pages is None:
        return {}
    try:
        repos = None if pages.access.is_operator(session) else g.get("pages_repos") or []
        return {"header": header(pages.settings, pages.db, repos)}
    except SQLAlchemyError:
        return {}  # the page says what failed; its header is left out
