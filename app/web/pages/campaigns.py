"""GET /campaigns/<id>: a campaign's repositories and states, for people signed in with GitHub
who may see its repositories (the /jobs rules); a row per repository they may see, and the
same 404 as for no such campaign when they may see none of them. POST /campaigns/<id>/start:
its owner (by GitHub user id) starts a campaign awaiting them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from flask import abort, g, redirect, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from app.store import audit, campaigns
from app.store.campaigns import LABELS
from app.store.fleet_tables import Campaign, CampaignState
from app.web.pages.access import Access
from app.web.pages.jobs import bp, check_form, pages_or_503, signed_in, to_sign_in
from app.web.pages.session import Session
from app.web.pages.state import Pages


@dataclass(frozen=True)
class RepoRow:
    repo: str
    state: str
    label: str
    pr_url: str | None
    pr_number: int | None
    ci: str | None
    reason: str | None
    job_id: int | None


@bp.get("/campaigns/<int:campaign_id>")
def campaign(campaign_id: int) -> BaseResponse | str:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in()
    found = campaigns.get(pages.db, campaign_id)
    if found is None:
        abort(404, "No such campaign.")
    rows = visible_rows(pages, session, found)
    totals = Counter(r.label for r in rows)
    awaiting = found.state == CampaignState.AWAITING_OWNER
    web = pages.settings.github_url.rstrip("/")
    return render_template(
        "pages/campaign.html",
        campaign=found,
        rows=rows,
        totals=[(label, totals[label]) for label in LABELS.values() if totals[label]],
        issue_url=f"{web}/{found.issue_repo}/issues/{found.issue_number}"
        if found.issue_number
        else None,
        session=session,
        awaiting=awaiting,
        startable=awaiting and is_owner(session, found),
        file_mark=campaigns.file_mark(found.text),
    )


@bp.post("/campaigns/<int:campaign_id>/start")
def start(campaign_id: int) -> BaseResponse:
    """The owner's consent to a campaign file someone pushed to the configuration
    repository: it becomes active and the dispatchers' sweep starts its jobs."""
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in(f"/campaigns/{campaign_id}")
    found = campaigns.get(pages.db, campaign_id)
    if found is None:
        abort(404, "No such campaign.")
    visible_rows(pages, session, found)
    check_form(session, "press Start again")
    if not is_owner(session, found):
        abort(403, f"Only its owner, @{found.owner}, may start this campaign.")
    mark = request.form.get("file", "")
    if not campaigns.approve(pages.db, found.id, mark):
        abort(
            409,
            "The campaign no longer awaits you, or its file changed since this page was "
            "shown: reload the page.",
        )
    audit.record(
        pages.db,
        audit.CAMPAIGN_APPROVED,
        repo=found.issue_repo,
        actor=session.login,
        detail={"campaign_id": found.id, "name": found.name, "file": mark},
    )
    return redirect(f"/campaigns/{found.id}", code=303)


def is_owner(session: Session, found: Campaign) -> bool:
    """The signed-in person is the campaign's owner: their GitHub user id, not a login."""
    return found.owner_id is not None and found.owner_id == session.user_id


def visible_rows(pages: Pages, session: Session, found: Campaign) -> list[RepoRow]:
    """The campaign's repositories `session`'s person may see; 404 when none."""
    web = pages.settings.github_url.rstrip("/")
    rows = [
        RepoRow(
            r.repo,
            r.state,
            LABELS.get(r.state, r.state),
            f"{web}/{r.repo}/pull/{r.pr_number}" if r.pr_number else None,
            r.pr_number,
            r.ci_state,
            r.reason,
            r.job_id,
        )
        for r in campaigns.repos(pages.db, found.id)
        if pages.access.of(session, r.repo) != Access.NONE
    ]
    if not rows:
        abort(404, "No such campaign.")
    g.pages_repos = [r.repo for r in rows]
    return rows
