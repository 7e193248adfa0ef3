"""GET /campaigns/<id>: a campaign's repositories and states, for people signed in with GitHub
who may see its repositories (the /jobs rules); a row per repository they may see, and the
same 404 as for no such campaign when they may see none of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from flask import abort, g, render_template
from werkzeug.wrappers import Response as BaseResponse

from app.store import campaigns
from app.store.campaigns import LABELS
from app.web.pages.access import Access
from app.web.pages.jobs import bp, pages_or_503, signed_in, to_sign_in


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
        for r in campaigns.repos(pages.db, campaign_id)
        if pages.access.of(session, r.repo) != Access.NONE
    ]
    if not rows:
        abort(404, "No such campaign.")
    g.pages_repos = [r.repo for r in rows]
    totals = Counter(r.label for r in rows)
    return render_template(
        "pages/campaign.html",
        campaign=found,
        rows=rows,
        totals=[(label, totals[label]) for label in LABELS.values() if totals[label]],
        issue_url=f"{web}/{found.issue_repo}/issues/{found.issue_number}"
        if found.issue_number
        else None,
        session=session,
    )
