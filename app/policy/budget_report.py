"""Today's spend against budget for every repository and installation that spent (metrics, CLI)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from app.core.settings import Settings
from app.policy.budgets import Budget, Scope, Spend, day_start, spend
from app.policy.org_config import effective_config, load_org_config
from app.policy.repo_config import BudgetLimits, ConfigError, RepoConfig, parse_repo_config
from app.store.db import Database
from app.store.models import Job, RepoConfigCache, utcnow


@dataclass(frozen=True)
class Row:
    """One repository's or installation's day: what it spent, and its limits (None: none)."""

    scope: Scope
    name: str  # owner/name, or the installation's id
    spent: Spend
    limits: BudgetLimits

    def limit(self, budget: Budget) -> float | None:
        value = getattr(self.limits, budget.value)
        return None if value is None else float(value)


def _repo_config(db: Database, repo: str) -> RepoConfig:
    """The repository's file as a worker last read it (the defaults when unread or invalid)."""
    with db.read() as s:
        text = s.scalar(select(RepoConfigCache.text).where(RepoConfigCache.repo == repo))
    try:
        return parse_repo_config(text)[0]
    except ConfigError:
        return RepoConfig()


def report(
    db: Database,
    settings: Settings,
    kinds: Sequence[str],
    *,
    repo: str | None = None,
    now: datetime | None = None,
) -> list[Row]:
    """A row for each repository (only `repo` when given) and installation with a job started
    today; ConfigError (OrgConfigError) when the organisation file is unusable."""
    now = now or utcnow()
    org = load_org_config(settings)
    query = select(Job.repo, Job.installation_id).where(
        Job.started_at >= day_start(now), Job.kind.in_(list(kinds))
    )
    if repo is not None:
        query = query.where(Job.repo == repo)
    with db.read() as s:
        pairs = {(name, installation) for name, installation in s.execute(query)}
    rows: list[Row] = []
    for name in sorted({r for r, _ in pairs}):
        config = effective_config(org, _repo_config(db, name))
        rows.append(
            Row(Scope.REPOSITORY, name, spend(db, kinds, repo=name, now=now), config.budgets)
        )
    for installation in sorted({i for _, i in pairs if i is not None}):
        spent = spend(db, kinds, installation_id=installation, now=now)
        rows.append(Row(Scope.INSTALLATION, str(installation), spent, org.budgets.installation))
    return rows
