"""Daily budgets: what a repository and an installation spent today (UTC), against the limits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import select, update

from app.policy.repo_config import BudgetLimits, RepoConfig
from app.store.db import Database
from app.store.models import Job, utcnow

OVER_BUDGET = "over_budget"  # the outcome of a job refused before it started
BUDGET_REACHED = "budget_reached"  # the outcome of a job stopped mid-way


class Budget(StrEnum):
    """What a budget limits (the keys of `budgets:`)."""

    AGENT_TOKENS = "agent_tokens"
    COST_USD = "cost_usd"
    SANDBOX_MINUTES = "sandbox_minutes"
    JOBS = "jobs"


class Scope(StrEnum):
    """Whose day a budget counts."""

    REPOSITORY = "repository"
    INSTALLATION = "installation"


@dataclass(frozen=True)
class Spend:
    """What was spent in one day."""

    agent_tokens: int = 0
    cost_usd: float = 0.0
    sandbox_minutes: float = 0.0
    jobs: int = 0

    def of(self, budget: Budget) -> float:
        return float(getattr(self, budget.value))


@dataclass(frozen=True)
class Line:
    """One budget of one scope: today's spend against its limit."""

    scope: Scope
    budget: Budget
    spent: float
    limit: float

    @property
    def reached(self) -> bool:
        return self.spent >= self.limit

    def would_exceed(self) -> bool:
        """Whether a new job may not start under it: one more job, or nothing left."""
        if self.budget is Budget.JOBS:
            return self.spent + 1 > self.limit
        return self.reached

    def said(self) -> str:
        """`the repository's agent_tokens budget (1200 of 1000)`."""
        return (
            f"the {self.scope.value}'s daily `{self.budget.value}` budget "
            f"({_number(self.spent)} of {_number(self.limit)} spent)"
        )


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def day_start(now: datetime) -> datetime:
    """The start of `now`'s UTC day."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def resets_at(now: datetime) -> datetime:
    """When today's budgets start again: the next 00:00 UTC."""
    return day_start(now) + timedelta(days=1)


def spend(
    db: Database,
    kinds: Sequence[str],
    *,
    repo: str | None = None,
    installation_id: int | None = None,
    now: datetime | None = None,
    exclude: int | None = None,
) -> Spend:
    """Today's spend of jobs of `kinds` on `repo` (or on every repository of
    `installation_id`), read from the jobs table. A job counts once it has started; a job
    refused as over budget never ran and does not count; `exclude` is the asking job."""
    start = day_start(now or utcnow())
    query = select(
        Job.id,
        Job.result,
        Job.agent_tokens_in,
        Job.agent_tokens_out,
        Job.cost_usd,
        Job.sandbox_seconds,
    ).where(Job.started_at >= start, Job.kind.in_(list(kinds)))
    if repo is not None:
        query = query.where(Job.repo == repo)
    if installation_id is not None:
        query = query.where(Job.installation_id == installation_id)
    tokens, cost, seconds, jobs = 0, 0.0, 0.0, 0
    with db.read() as s:
        for job_id, result, t_in, t_out, usd, secs in s.execute(query):
            if job_id == exclude or (result or {}).get("outcome") == OVER_BUDGET:
                continue
            tokens += (t_in or 0) + (t_out or 0)
            cost += usd or 0.0
            seconds += secs or 0.0
            jobs += 1
    return Spend(tokens, cost, seconds / 60.0, jobs)


def lines_for(limits: BudgetLimits, scope: Scope, spent: Spend) -> list[Line]:
    """The budgets `limits` sets, each with its spend."""
    found = []
    for budget in Budget:
        limit = getattr(limits, budget.value)
        if limit is not None:
            found.append(Line(scope, budget, spent.of(budget), float(limit)))
    return found


def lines_of(config: RepoConfig, repo_spend: Spend, installation_spend: Spend) -> list[Line]:
    """Every budget of the effective config: the repository's, then the installation's."""
    return lines_for(config.budgets, Scope.REPOSITORY, repo_spend) + lines_for(
        config.budgets.installation, Scope.INSTALLATION, installation_spend
    )


def refusal(lines: Iterable[Line]) -> Line | None:
    """The first budget a new job would exceed, or None when it may start."""
    return next((line for line in lines if line.would_exceed()), None)


def reached(lines: Iterable[Line]) -> Line | None:
    """The first spending budget (not `jobs`) that is used up, or None."""
    return next((ln for ln in lines if ln.budget is not Budget.JOBS and ln.reached), None)


def tokens_left(lines: Iterable[Line]) -> int | None:
    """The agent tokens left today under every token budget; None when none limits them."""
    left = [int(line.limit - line.spent) for line in lines if line.budget is Budget.AGENT_TOKENS]
    return max(0, min(left)) if left else None


def refused_message(line: Line, now: datetime) -> str:
    """Why a job did not start, and when it may."""
    at = resets_at(now).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"onloop did not start this job: it would exceed {line.said()}. The budget resets at "
        f"{at}; ask again then, or ask the operator to raise it."
    )


def cost_of(
    prices: Mapping[str, Mapping[str, float]], model: str, tokens_in: int, tokens_out: int
) -> float:
    """The estimated cost in USD: ONLOOP_MODEL_PRICES is USD per 1M tokens, input and output."""
    price = prices.get(model) or {}
    return (
        tokens_in * float(price.get("input", 0.0)) + tokens_out * float(price.get("output", 0.0))
    ) / 1_000_000


def add_usage(
    db: Database,
    job_id: int,
    *,
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost_usd: float = 0.0,
    sandbox_seconds: float = 0.0,
) -> None:
    """Add what one step of the job spent to the job's row."""
    with db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                agent_tokens_in=Job.agent_tokens_in + tokens_in,
                agent_tokens_out=Job.agent_tokens_out + tokens_out,
                cost_usd=Job.cost_usd + cost_usd,
                sandbox_seconds=Job.sandbox_seconds + sandbox_seconds,
            )
        )
