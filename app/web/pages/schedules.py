"""GET /schedules/<id>: one version of a repository's schedule, for people who may see the
repository; POST /schedules/<id>/approve: its owner (by GitHub user id) lets it run in their
name, as shown."""

from __future__ import annotations

from flask import abort, redirect, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from app.store import audit, schedule_approvals
from app.store.fleet_tables import ScheduleApproval
from app.web.pages.access import Access
from app.web.pages.jobs import bp, check_form, pages_or_503, signed_in, to_sign_in
from app.web.pages.session import Session
from app.web.pages.state import Pages


def _visible(pages: Pages, session: Session, approval_id: int) -> ScheduleApproval:
    """The approval, or the same 404 as for none when its repository is hidden from them."""
    found = schedule_approvals.get(pages.db, approval_id)
    if found is None or pages.access.of(session, found.repo) == Access.NONE:
        abort(404, "No such schedule.")
    return found


def _page(found: ScheduleApproval, session: Session, status: int = 200) -> tuple[str, int]:
    html = render_template(
        "pages/schedule.html",
        found=found,
        session=session,
        owner=found.owner_id == session.user_id,
    )
    return html, status


@bp.get("/schedules/<int:approval_id>")
def schedule(approval_id: int) -> BaseResponse | tuple[str, int]:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in()
    return _page(_visible(pages, session, approval_id), session)


@bp.post("/schedules/<int:approval_id>/approve")
def approve(approval_id: int) -> BaseResponse:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in(f"/schedules/{approval_id}")
    found = _visible(pages, session, approval_id)
    check_form(session, "press Approve again")
    if found.owner_id != session.user_id:
        abort(403, f"Only its owner, @{found.owner}, may approve this schedule.")
    digest = request.form.get("digest", "")
    if not schedule_approvals.approve(pages.db, found.id, session.user_id, digest):
        abort(409, "The schedule changed since this page was shown: reload the page.")
    audit.record(
        pages.db,
        audit.SCHEDULE_APPROVED,
        repo=found.repo,
        actor=session.login,
        detail={"schedule": found.schedule, "approval_id": found.id, "digest": digest},
    )
    return redirect(f"/schedules/{found.id}", code=303)
