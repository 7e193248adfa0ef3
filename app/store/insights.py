"""The figures of /insights for a period, per repository and overall, read from the jobs,
their audit entries and onloop's pull requests (app/intake/insights.py records those)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import func, or_, select

from app.core.kinds import Kind
from app.store.audit import SANDBOX_EXEC
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState, OnloopPull, aware, utcnow


class Period(StrEnum):
    """The periods the page offers."""

    WEEK = "7d"
    MONTH = "30d"
    QUARTER = "90d"

    @property
    def days(self) -> int:
        return int(self.value.removesuffix("d"))

    def since(self, now: datetime | None = None) -> datetime:
        return (now or utcnow()) - timedelta(days=self.days)


@dataclass(frozen=True)
class JobRow:
    id: int
    repo: str
    kind: str
    state: str
    number: int | None
    created_at: datetime
    finished_at: datetime | None
    first_command_at: datetime | None
    tokens: int
    sandbox_seconds: float
    cost_usd: float


@dataclass
class Pulls:
    opened: int = 0
    merged: int = 0
    closed_unmerged: int = 0
    reverted: int = 0
    rework_commits: int = 0  # commits without the Onloop-Job trailer in PRs merged
    reworked: int = 0  # merged PRs with at least one such commit


@dataclass
class CiFixes:
    fixed: int = 0  # failures a run of fix_ci jobs on one PR ended with a success
    rounds: int = 0  # fix_ci jobs those took, the successful one included
    unfixed: int = 0  # runs of fix_ci jobs that have not (yet) ended with a success

    @property
    def per_fix(self) -> float | None:
        return self.rounds / self.fixed if self.fixed else None


@dataclass
class Latency:
    """Seconds from the trigger (the job's creation) to its first sandbox command and to
    its result (the job finished), nearest-rank percentiles."""

    to_command: list[float] = field(default_factory=list)
    to_result: list[float] = field(default_factory=list)


@dataclass
class Figures:
    """One repository's figures (`repo` None: every repository shown together)."""

    repo: str | None
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> state -> count
    pulls: Pulls = field(default_factory=Pulls)
    ci: CiFixes = field(default_factory=CiFixes)
    latency: Latency = field(default_factory=Latency)
    tokens: int = 0
    sandbox_seconds: float = 0.0
    cost_usd: float = 0.0

    @property
    def job_count(self) -> int:
        return sum(sum(states.values()) for states in self.jobs.values())

    @property
    def sandbox_minutes(self) -> float:
        return self.sandbox_seconds / 60.0


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank `p`th percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def repositories(db: Database, since: datetime) -> list[str]:
    """The repositories with a job or an onloop pull request in the period."""
    with db.read() as s:
        jobs = s.scalars(select(Job.repo).where(Job.created_at >= since).distinct())
        found = set(jobs)
        pulls = select(OnloopPull.repo).where(
            or_(
                OnloopPull.opened_at >= since,
                OnloopPull.closed_at >= since,
                OnloopPull.reverted_at >= since,
            )
        )
        found.update(s.scalars(pulls.distinct()))
    return sorted(found, key=str.lower)


def figures(db: Database, repos: Sequence[str], since: datetime) -> list[Figures]:
    """The overall figures of `repos` first, then each repository's."""
    jobs = _jobs(db, repos, since)
    pulls = _pulls(db, repos, since)
    overall = Figures(None)
    each = {repo: Figures(repo) for repo in repos}
    for row in jobs:
        for target in (overall, each[row.repo]):
            _add_job(target, row)
    for repo, counts in pulls.items():
        for target in (overall, each[repo]):
            _add_pulls(target.pulls, counts)
    for repo, fixes in ci_fixes(jobs).items():
        for target in (overall, each[repo]):
            target.ci.fixed += fixes.fixed
            target.ci.rounds += fixes.rounds
            target.ci.unfixed += fixes.unfixed
    return [overall, *(each[repo] for repo in repos)]


def _add_job(target: Figures, row: JobRow) -> None:
    states = target.jobs.setdefault(row.kind, {})
    states[row.state] = states.get(row.state, 0) + 1
    target.tokens += row.tokens
    target.sandbox_seconds += row.sandbox_seconds
    target.cost_usd += row.cost_usd
    if row.first_command_at is not None:
        target.latency.to_command.append((row.first_command_at - row.created_at).total_seconds())
    if row.finished_at is not None and row.state in (JobState.SUCCEEDED, JobState.FAILED):
        target.latency.to_result.append((row.finished_at - row.created_at).total_seconds())


def _add_pulls(target: Pulls, counts: Pulls) -> None:
    for name in ("opened", "merged", "closed_unmerged", "reverted", "rework_commits", "reworked"):
        setattr(target, name, getattr(target, name) + getattr(counts, name))


def _jobs(db: Database, repos: Sequence[str], since: datetime) -> list[JobRow]:
    first = (
        select(AuditEntry.job_id, func.min(AuditEntry.at).label("at"))
        .where(AuditEntry.action == SANDBOX_EXEC, AuditEntry.at >= since)
        .group_by(AuditEntry.job_id)
        .subquery()
    )
    query = (
        select(
            Job.id,
            Job.repo,
            Job.kind,
            Job.state,
            Job.number,
            Job.created_at,
            Job.finished_at,
            first.c.at,
            Job.agent_tokens_in + Job.agent_tokens_out,
            Job.sandbox_seconds,
            Job.cost_usd,
        )
        .outerjoin(first, first.c.job_id == Job.id)
        .where(Job.created_at >= since, Job.repo.in_(list(repos)))
        .order_by(Job.created_at, Job.id)
    )
    with db.read() as s:
        rows = s.execute(query).all()
    return [
        JobRow(
            id=r[0],
            repo=r[1],
            kind=r[2],
            state=r[3],
            number=r[4],
            created_at=aware(r[5]) or utcnow(),
            finished_at=aware(r[6]),
            first_command_at=aware(r[7]),
            tokens=int(r[8] or 0),
            sandbox_seconds=float(r[9] or 0.0),
            cost_usd=float(r[10] or 0.0),
        )
        for r in rows
    ]


def _pulls(db: Database, repos: Sequence[str], since: datetime) -> dict[str, Pulls]:
    found: dict[str, Pulls] = defaultdict(Pulls)
    with db.read() as s:
        pulls = s.scalars(select(OnloopPull).where(OnloopPull.repo.in_(list(repos)))).all()
        for pull in pulls:
            counts = found[pull.repo]
            opened, closed = aware(pull.opened_at), aware(pull.closed_at)
            reverted = aware(pull.reverted_at)
            counts.opened += int(opened is not None and opened >= since)
            if closed is not None and closed >= since:
                if pull.merged:
                    counts.merged += 1
                    rework = pull.rework_commits or 0
                    counts.rework_commits += rework
                    counts.reworked += int(rework > 0)
                else:
                    counts.closed_unmerged += 1
            counts.reverted += int(reverted is not None and reverted >= since)
    return found


def ci_fixes(jobs: Iterable[JobRow]) -> dict[str, CiFixes]:
    """fix_ci jobs per pull request, in order: each success ends one fixed failure and the
    jobs since the previous success are its rounds. Cancelled or unfinished jobs (a newer
    head replaced them) are not rounds."""
    runs: dict[tuple[str, int], int] = defaultdict(int)
    found: dict[str, CiFixes] = defaultdict(CiFixes)
    for row in jobs:
        if row.kind != Kind.FIX_CI or row.number is None:
            continue
        key = (row.repo, row.number)
        if row.state == JobState.FAILED:
            runs[key] += 1
        elif row.state == JobState.SUCCEEDED:
            found[row.repo].fixed += 1
            found[row.repo].rounds += runs.pop(key, 0) + 1
    for (repo, _), _rounds in runs.items():
        found[repo].unfixed += 1
    return found
