"""`/agent continue`: a fix stopped at its daily budget, resumed from its WIP branch."""

from __future__ import annotations

from typing import Any

from github import GithubException
from github.Repository import Repository
from sqlalchemy import select

from app.core.kinds import Kind, command_of
from app.policy.budgets import BUDGET_REACHED
from app.store.models import Job, JobState
from tasks.blueprints.budget import CONTINUE
from tasks.blueprints.change import configured_agent
from tasks.blueprints.common import begin, installation_repo
from tasks.blueprints.fix_issue import NO_AGENT, PLAN, as_labelled, fix
from tasks.runner.context import JobContext, JobFailed

STALE = "stale"  # the WIP branch is gone or holds something else
NOTHING = "nothing_to_continue"  # no job here stopped at its budget (or it was continued)
RESUMABLE = (Kind.FIX_ISSUE, Kind.CONTINUE)  # a fix of an issue, or a continuation of one
LOOK_BACK = 50  # the newest jobs of the thread that are looked at


def stopped_job(ctx: JobContext) -> Job | None:
    """The newest job of this thread that stopped at its budget, unless a later continuation
    finished it."""
    query = (
        select(Job)
        .where(Job.repo == ctx.job.repo, Job.number == ctx.job.number, Job.id < ctx.job.id)
        .order_by(Job.id.desc())
        .limit(LOOK_BACK)
    )
    with ctx.db.read() as s:
        for job in s.scalars(query):
            result = job.result or {}
            if job.kind == Kind.CONTINUE and job.state == JobState.SUCCEEDED:
                return None  # the last stopped job was continued to its end
            if job.state == JobState.FAILED and result.get("outcome") == BUDGET_REACHED:
                s.expunge(job)
                return job
    return None


def _tip(repo: Repository, branch: str) -> str | None:
    try:
        return repo.get_branch(branch).commit.sha
    except GithubException as exc:
        if exc.status == 404:
            return None
        raise


def run_continue(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = ["policy", "authorization", "continue", *PLAN[2:]]
    found = installation_repo(ctx)
    work = begin(ctx, "continue", found)
    if configured_agent(ctx) is None:
        raise JobFailed(NO_AGENT, outcome="no_agent")
    with ctx.step("continue") as record:
        stopped = stopped_job(ctx)
        if stopped is None:
            raise JobFailed(
                f"There is nothing to continue here: no job on this thread stopped at its "
                f"daily budget (or its continuation finished). {CONTINUE} resumes such a job.",
                outcome=NOTHING,
            )
        if stopped.kind not in RESUMABLE:
            raise JobFailed(
                f"Job {stopped.id} stopped at its budget, but only a fix of an issue can be "
                f"continued yet; ask for it again with {command_of(stopped.kind, ctx.kinds)} "
                "once the budget resets.",
                outcome=NOTHING,
            )
        said = stopped.result
        wip, sha, base = said.get("wip_branch"), said.get("wip_sha"), said.get("base")
        if wip and _tip(work.repo, wip) != sha:
            raise JobFailed(
                f"`{wip}` is gone or no longer holds what job {stopped.id} pushed, so onloop "
                "will not build on it; ask for the fix again (remove and add the label).",
                outcome=STALE,
                wip_branch=wip,
            )
        assert ctx.job.number is not None
        issue = work.repo.get_issue(ctx.job.number)
        pinned = said.get("issue_sha256") or stopped.params.get("issue_sha256")
        record.output = as_labelled(ctx, work, issue, pinned=pinned)
        record.output += f"; job {stopped.id} from {wip or 'its start'}"
    if not base:
        base = work.repo.get_branch(work.repo.default_branch).commit.sha
    result = fix(ctx, work, issue, base, resume=sha if wip else None, pinned=pinned)
    return {**result, "continued": stopped.id}
