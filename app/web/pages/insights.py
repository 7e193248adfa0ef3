"""GET /insights?period=7d|30d|90d&repo=owner/name: onloop's figures for a period, overall
and per repository, over the repositories the person may see (operators: all of them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from flask import abort, render_template, request
from werkzeug.wrappers import Response as BaseResponse

from app.store.insights import Figures, Period, figures, percentile, repositories
from app.web.pages.access import Access
from app.web.pages.charts import Chart, jobs_by_kind, ordered_outcomes
from app.web.pages.jobs import bp, pages_or_503, signed_in, to_sign_in

# owner/name as GitHub allows them (logins: 39 characters; names: 100): anything else names
# no repository, and is never put in a GitHub API path with the person's token.
REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class Figure:
    """One number on the page; its element id is `insight-<key>` overall and
    `insight-<owner>--<name>-<key>` for a repository (lower case): stable for tests."""

    key: str
    label: str
    text: str
    value: str  # the raw number in data-value ("" when there is none)


@dataclass(frozen=True)
class Section:
    repo: str | None
    prefix: str  # "insight-" or "insight-<owner>--<name>-"
    groups: list[tuple[str, list[Figure]]]
    kinds: list[str]
    outcomes: list[str]
    jobs: dict[str, dict[str, int]]
    chart: Chart


def prefix_of(repo: str | None) -> str:
    """GitHub logins never hold `--`, so `owner--name` names one repository."""
    return "insight-" if repo is None else f"insight-{repo.lower().replace('/', '--')}-"


def _count(key: str, label: str, value: int) -> Figure:
    return Figure(key, label, f"{value:,}", str(value))


def _seconds(key: str, label: str, value: float | None) -> Figure:
    if value is None:
        return Figure(key, label, "—", "")
    text = f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"
    return Figure(key, label, text, f"{value:.1f}")


def _groups(f: Figures) -> list[tuple[str, list[Figure]]]:
    per_fix = f.ci.per_fix
    lat = f.latency
    return [
        (
            "Pull requests",
            [
                _count("prs-opened", "opened", f.pulls.opened),
                _count("prs-merged", "merged", f.pulls.merged),
                _count("prs-closed", "closed unmerged", f.pulls.closed_unmerged),
                _count("prs-reverted", "reverted later", f.pulls.reverted),
                _count(
                    "rework-commits", "commits people added before merge", f.pulls.rework_commits
                ),
                _count("reworked-prs", "merged PRs with such commits", f.pulls.reworked),
            ],
        ),
        (
            "CI fixes",
            [
                _count("ci-fixed", "failures fixed", f.ci.fixed),
                _count("ci-rounds", "fix_ci rounds they took", f.ci.rounds),
                Figure(
                    "ci-rounds-per-fix",
                    "rounds per fixed failure",
                    "—" if per_fix is None else f"{per_fix:.2f}",
                    "" if per_fix is None else f"{per_fix:.2f}",
                ),
                _count("ci-unfixed", "failures not fixed (yet)", f.ci.unfixed),
            ],
        ),
        (
            "Time from trigger",
            [
                _seconds(
                    "to-command-p50",
                    "to first sandbox command, p50",
                    percentile(lat.to_command, 50),
                ),
                _seconds(
                    "to-command-p95",
                    "to first sandbox command, p95",
                    percentile(lat.to_command, 95),
                ),
                _seconds("to-result-p50", "to result, p50", percentile(lat.to_result, 50)),
                _seconds("to-result-p95", "to result, p95", percentile(lat.to_result, 95)),
            ],
        ),
        (
            "Spend",
            [
                _count("jobs-total", "jobs", f.job_count),
                _count("agent-tokens", "agent tokens", f.tokens),
                Figure(
                    "sandbox-minutes",
                    "sandbox minutes",
                    f"{f.sandbox_minutes:,.1f}",
                    f"{f.sandbox_minutes:.1f}",
                ),
                Figure(
                    "cost-usd", "estimated cost (USD)", f"{f.cost_usd:,.2f}", f"{f.cost_usd:.2f}"
                ),
            ],
        ),
    ]


def section(f: Figures) -> Section:
    return Section(
        repo=f.repo,
        prefix=prefix_of(f.repo),
        groups=_groups(f),
        kinds=sorted(f.jobs),
        outcomes=ordered_outcomes(f.jobs),
        jobs=f.jobs,
        chart=jobs_by_kind(f.jobs),
    )


@bp.get("/insights")
def insights() -> BaseResponse | str:
    pages = pages_or_503()
    session = signed_in(pages)
    if session is None:
        return to_sign_in()
    try:
        period = Period(request.args.get("period", Period.MONTH))
    except ValueError:
        abort(400, "period must be one of " + ", ".join(p.value for p in Period) + ".")
    since = period.since()
    known = repositories(pages.db, since)
    chosen = request.args.get("repo") or None
    if chosen is not None:
        if not REPO_NAME.match(chosen) or pages.access.of(session, chosen) == Access.NONE:
            abort(404, "No such repository.")
        named = next((r for r in known if r.lower() == chosen.lower()), chosen)
        shown = [named]
    else:
        shown = [r for r in known if pages.access.of(session, r) != Access.NONE]
    found = figures(pages.db, shown, since)
    choices = (
        shown
        if chosen is None
        else [r for r in known if pages.access.of(session, r) != Access.NONE]
    )
    return render_template(
        "pages/insights.html",
        session=session,
        period=period,
        periods=list(Period),
        repo=chosen,
        choices=choices,
        sections=[section(f) for f in found],
    )
