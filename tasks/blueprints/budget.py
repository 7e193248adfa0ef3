"""A job under the daily budgets: refused before it starts, or stopped mid-way onto a WIP branch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.core.kinds import sandboxed
from app.core.markdown import plain
from app.policy.budgets import (
    BUDGET_REACHED,
    OVER_BUDGET,
    Line,
    add_usage,
    cost_of,
    lines_of,
    refusal,
    refused_message,
    resets_at,
    spend,
    tokens_left,
)
from app.policy.repo_config import RepoConfig
from app.store.models import utcnow
from tasks.agent import AgentResult, Budget
from tasks.runner.context import JobContext, JobFailed

if TYPE_CHECKING:
    from tasks.blueprints.change import Change

CONTINUE = "`/agent continue`"


def wip_branch(job_id: int) -> str:
    """Where a job stopped at its budget pushes what it has (never the PR's own branch)."""
    return f"onloop/wip/{job_id}"


def today(ctx: JobContext, config: RepoConfig) -> list[Line]:
    """Every budget of `config`, with today's spend of the job's repository and installation
    (this job's own spend included)."""
    kinds, now = sandboxed(ctx.kinds), utcnow()
    repo = spend(ctx.db, kinds, repo=ctx.job.repo, now=now)
    installation = spend(ctx.db, kinds, installation_id=ctx.job.installation_id, now=now)
    return lines_of(config, repo, installation)


def check_start(ctx: JobContext, config: RepoConfig) -> str:
    """What the step says when no budget refuses a new job; JobFailed (`over_budget`) naming
    the budget, its spend, its limit and when it resets otherwise."""
    now = utcnow()
    kinds = sandboxed(ctx.kinds)
    repo = spend(ctx.db, kinds, repo=ctx.job.repo, now=now, exclude=ctx.job.id)
    installation = spend(
        ctx.db, kinds, installation_id=ctx.job.installation_id, now=now, exclude=ctx.job.id
    )
    lines = lines_of(config, repo, installation)
    line = refusal(lines)
    if line is None:
        return "; ".join(f"{ln.scope}.{ln.budget} {ln.spent:g}/{ln.limit:g}" for ln in lines)
    ctx.meter.inc("budget_stops", outcome=OVER_BUDGET, budget=line.budget.value)
    raise JobFailed(
        refused_message(line, now),
        outcome=OVER_BUDGET,
        **_said(line),
        resets_at=resets_at(now).isoformat(),
    )


def _said(line: Line) -> dict[str, Any]:
    return {
        "budget": line.budget.value,
        "scope": line.scope.value,
        "spent": line.spent,
        "limit": line.limit,
    }


def agent_budget(ctx: JobContext, config: RepoConfig, budget: Budget) -> Budget:
    """The agent step's budget: no more tokens than today's budgets have left."""
    left = tokens_left(today(ctx, config))
    if left is None or left >= budget.max_tokens:
        return budget
    return Budget(budget.max_steps, budget.wall_seconds, left, budget.max_retries)


def record_agent(ctx: JobContext, result: AgentResult) -> None:
    """Add what the agent step used to the job's row, priced by ONLOOP_MODEL_PRICES."""
    tokens_in, tokens_out = result.tokens_in, result.tokens_out
    if not (tokens_in or tokens_out) and result.tokens:
        tokens_in = result.tokens  # only a total reported: priced as input
    model = result.model or ctx.settings.agent_model
    cost = cost_of(ctx.settings.model_prices, model, tokens_in, tokens_out)
    add_usage(ctx.db, ctx.job.id, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost)


def stopped_message(change: Change, branch: str | None, line: Line) -> str:
    """The status comment of a job stopped at its budget: done, remaining, how to go on."""
    now = utcnow()
    if branch:
        where = f"What it has is pushed to `{branch}` ({(change.new_sha or '')[:7]})."
    elif change.violations:
        rules = "; ".join(change.violations)
        where = f"Its change so far breaks the blast-radius rules ({plain(rules)}): not pushed."
    else:
        where = "It had changed nothing yet, so nothing was pushed."
    last = plain((change.agent.summary if change.agent else "")[:300]) or "none"
    return (
        f"onloop stopped this job mid-way: it reached {line.said()}. {where}\n\n"
        f"Done:\n\n{change.ran()}\n\n"
        f"Remaining: the agent had not finished (its last words: {last}); the repository's "
        "fixers and checks have not run, and nothing was pushed to the pull request's branch.\n\n"
        f"To continue, comment {CONTINUE} here: it resumes from `{branch or 'the start'}` "
        f"within the next day's budget (it resets at {resets_at(now):%Y-%m-%d %H:%M} UTC)."
    )


def stop_at_budget(change: Change, line: Line, base: str, **extra: Any) -> None:
    """Push what the change has to its WIP branch and end the job as `budget_reached`."""
    work = change.work
    branch = wip_branch(work.ctx.job.id)
    pushed: str | None = None
    if change.new_sha is not None and not change.violations:
        lease = work.branch_lease(branch, f"comment {CONTINUE} again")
        change.new_sha = work.push(change.new_sha, branch, lease=lease)
        pushed = branch
    work.ctx.meter.inc("budget_stops", outcome=BUDGET_REACHED, budget=line.budget.value)
    raise JobFailed(
        stopped_message(change, pushed, line),
        outcome=BUDGET_REACHED,
        wip_branch=pushed,
        wip_sha=change.new_sha if pushed else None,
        base=base,
        **_said(line),
        **extra,
    )
