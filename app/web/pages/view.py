"""A job as its page shows it: what it is, its steps drawn as bars with their output, its
audit entries and its links on GitHub. Everything here is data; the template escapes it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from markupsafe import Markup
from sqlalchemy import select

from app.core.settings import Settings
from app.store import joblog
from app.store.audit import SANDBOX_EXEC
from app.store.db import Database
from app.store.models import LIVE_STATES, AuditEntry, Job, aware, utcnow
from app.web.pages.ansi import to_html
from app.web.pages.details import Details, details

TAIL_CHARS = 100_000  # of one step's output on the page (the rest is kept, not shown)
AUDIT_ROWS = 500
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class StepView:
    name: str
    kind: str
    state: str
    duration: str  # "1.2 s", or "running"
    offset: int  # where its bar starts, percent of the timeline
    width: int  # its bar's length, percent
    error: str | None
    output: Markup  # escaped, ANSI colours as spans
    clipped: bool  # only the tail is shown


@dataclass(frozen=True)
class AuditView:
    at: str
    action: str
    actor: str
    detail: str


@dataclass(frozen=True)
class Link:
    label: str
    url: str


@dataclass(frozen=True)
class JobPage:
    id: int
    kind: str
    repo: str
    repo_url: str
    target: Link | None  # the issue or pull request
    requester: Link
    state: str
    live: bool
    created: str
    started: str
    finished: str
    duration: str
    steps: list[StepView]
    other_output: Markup | None  # output outside any step
    dropped: str  # the marker when older output was dropped
    audit: list[AuditView]
    links: list[Link]
    details: Details


def _when(value: datetime | None) -> str:
    when = aware(value)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else "—"


def _seconds(value: float | None) -> str:
    if value is None:
        return "running"
    if value < 60:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes} min {seconds:02d} s"


def _tail(text: str) -> tuple[Markup, bool]:
    clipped = len(text) > TAIL_CHARS
    if clipped:
        text = text[-TAIL_CHARS:].split("\n", 1)[-1]
    return to_html(text), clipped


def _elapsed(job: Job) -> float | None:
    started = aware(job.started_at)
    if started is None:
        return None
    end = aware(job.finished_at) or utcnow()
    return max((end - started).total_seconds(), 0.0)


def _began(step: dict[str, Any], job: Job) -> float | None:
    """Seconds from the job's start to the step's: from the record's `started`, which the
    step's span starts at too (tasks.runner.context); None for a record without one."""
    started, begun = step.get("started"), aware(job.started_at)
    if not isinstance(started, int | float) or begun is None:
        return None
    return max(float(started) - begun.timestamp(), 0.0)


def _steps(job: Job, output: dict[str, str]) -> list[StepView]:
    """Each step's bar, where its record says it began (back to back for older records)."""
    stored: list[dict[str, Any]] = [s for s in job.steps or [] if isinstance(s, dict)]
    durations = [s.get("duration") for s in stored]
    known = sum(d for d in durations if isinstance(d, int | float))
    ends = [
        (_began(s, job) or 0.0) + (d if isinstance(d, int | float) else 0.0)
        for s, d in zip(stored, durations, strict=True)
    ]
    elapsed = _elapsed(job) or 0.0
    total = max(known, elapsed, *ends, 0.001)
    views: list[StepView] = []
    at = 0.0
    for step, duration in zip(stored, durations, strict=True):
        name = str(step.get("name") or "")
        seconds = float(duration) if isinstance(duration, int | float) else None
        began = _began(step, job)
        at = at if began is None else began
        length = seconds if seconds is not None else max(total - at, 0.0)
        text = output.get(name) or str(step.get("output") or "")
        html, clipped = _tail(text)
        error = step.get("error")
        views.append(
            StepView(
                name=name,
                kind=str(step.get("kind") or ""),
                state=str(step.get("state") or ""),
                duration=_seconds(seconds),
                offset=min(int(at / total * 100), 99),
                width=max(1, min(round(length / total * 100), 100)),
                error=str(error) if error is not None else None,
                output=html,
                clipped=clipped,
            )
        )
        at += length
    return views


def _audit(db: Database, job_id: int) -> tuple[list[AuditView], list[dict[str, Any]]]:
    """The job's audit entries as the page lists them, and its sandbox commands' details."""
    with db.read() as s:
        rows = list(
            s.scalars(
                select(AuditEntry)
                .where(AuditEntry.job_id == job_id)
                .order_by(AuditEntry.id)
                .limit(AUDIT_ROWS)
            )
        )
    commands = [dict(r.detail or {}) for r in rows if r.action == SANDBOX_EXEC]
    return [
        AuditView(
            at=_when(row.at),
            action=row.action,
            actor=row.actor or "",
            detail=json.dumps(row.detail or {}, sort_keys=True)[:1000],
        )
        for row in rows
    ], commands


def _links(settings: Settings, job: Job) -> list[Link]:
    """The status comment, the check run, the pull request and the commit, where stored."""
    web = settings.github_url.rstrip("/")
    result = job.result if isinstance(job.result, dict) else {}
    links: list[Link] = []
    status = result.get("status_comment")
    if isinstance(status, str) and status.startswith(web + "/"):
        links.append(Link("status comment", status))
    if job.check_run_id:
        links.append(Link("check run", f"{web}/{job.repo}/runs/{int(job.check_run_id)}"))
    pr = result.get("pr")
    if isinstance(pr, int) and not isinstance(pr, bool):
        links.append(Link(f"pull request #{pr}", f"{web}/{job.repo}/pull/{pr}"))
    sha = result.get("new") or result.get("head")
    if isinstance(sha, str) and _SHA.match(sha):
        links.append(Link(f"commit {sha[:7]}", f"{web}/{job.repo}/commit/{sha}"))
    return links


def job_page(settings: Settings, db: Database, job: Job) -> JobPage:
    web = settings.github_url.rstrip("/")
    dropped, output = joblog.by_step(db, job.id)
    steps = _steps(job, output)
    named = {step.name for step in steps}
    other = "".join(text for name, text in output.items() if name not in named)
    target = (
        Link(f"#{job.number}", f"{web}/{job.repo}/issues/{job.number}")
        if job.number is not None
        else None
    )
    entries, commands = _audit(db, job.id)
    return JobPage(
        id=job.id,
        kind=job.kind,
        repo=job.repo,
        repo_url=f"{web}/{job.repo}",
        target=target,
        requester=Link(f"@{job.requested_by}", f"{web}/{job.requested_by}"),
        state=job.state,
        live=job.state in LIVE_STATES,
        created=_when(job.created_at),
        started=_when(job.started_at),
        finished=_when(job.finished_at),
        duration=_seconds(_elapsed(job)) if job.started_at else "—",
        steps=steps,
        other_output=_tail(other)[0] if other else None,
        dropped=dropped.strip(),
        audit=entries,
        links=_links(settings, job),
        details=details(settings, job, commands),
    )
