"""fix_issue: an agent's change for a labelled issue, validated, opened as the labeller's own PR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from github.Issue import Issue
from github.PullRequest import PullRequest

from app.core.kinds import Kind
from tasks.agent import AgentTask
from tasks.blueprints import Step, run_steps
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, ChangeOutcome, configured_agent, make_change
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person
from tasks.sandbox.trust import HeadTrust

NO_AGENT = (
    "onloop has no coding agent configured, so it cannot work on issues yet (it can still "
    "`/agent rebase`, `/agent review` and fix lint failures on pull requests). An operator can "
    "set `ONLOOP_AGENT=openai` with `ONLOOP_AGENT_BASE_URL`, `ONLOOP_AGENT_MODEL` and "
    "`ONLOOP_AGENT_API_KEY`, or `ONLOOP_AGENT=command` with `ONLOOP_AGENT_COMMAND`, then "
    "remove and add the label again."
)


@dataclass
class FixIssue:
    work: Work
    issue: Issue
    base_sha: str
    branch: str
    change: Change | None = None
    lease: str = ""
    pr: PullRequest | None = None
    outcome: ChangeOutcome | None = None


def _push(state: FixIssue) -> str | None:
    change = state.change
    if change is None or change.outcome != ChangeOutcome.READY or change.new_sha is None:
        state.outcome = change.outcome if change else ChangeOutcome.NO_CHANGE
        return None
    state.work.push(change.new_sha, state.branch, lease=state.lease)
    return f"pushed {change.new_sha[:12]} to {state.branch}"


def _open_pr(state: FixIssue) -> str | None:
    if state.outcome is not None:
        return None
    state.pr = as_person(state.work, lambda: _open_or_update(state))
    state.outcome = ChangeOutcome.PR
    return f"#{state.pr.number}"


def _open_or_update(state: FixIssue) -> PullRequest:
    """The PR for the branch, opened with the person's token; an earlier run's is updated."""
    work, change, number = state.work, state.change, state.issue.number
    assert change is not None
    owner = work.repo.full_name.split("/")[0]
    title = f"Fix #{number}: {state.issue.title}"[:240]
    body = change.pr_body(f"Fixes #{number}.")
    repo = work.user_repo
    existing = list(repo.get_pulls(state="open", head=f"{owner}:{state.branch}"))
    if existing:
        existing[0].edit(title=title, body=body)
        return existing[0]
    pr = repo.create_pull(base=work.repo.default_branch, head=state.branch, title=title, body=body)
    work.ctx.meter.inc("pull_requests_opened", kind="fix_issue")
    return pr


AFTER: list[Step[FixIssue]] = [Step("push", _push), Step("pr", _open_pr)]


def run_fix_issue(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = [
        "policy",
        "authorization",
        "branch",
        *(s.name for s in CHANGE_STEPS),
        *(s.name for s in AFTER),
    ]
    found = installation_repo(ctx)
    work = begin(ctx, "fix", found)
    if configured_agent(ctx) is None:
        raise JobFailed(NO_AGENT, outcome="no_agent")
    assert ctx.job.number is not None
    issue = work.repo.get_issue(ctx.job.number)
    base_sha = work.repo.get_branch(work.repo.default_branch).commit.sha
    ctx.head_sha = base_sha
    state = FixIssue(work, issue, base_sha, f"onloop/issue-{issue.number}")
    with ctx.step("branch") as record:
        state.lease = work.branch_lease(state.branch, "remove and add the label again")
        record.output = f"replacing {state.lease[:12]}" if state.lease else "new branch"
    state.change = make_change(
        work,
        AgentTask(Kind.FIX_ISSUE, issue.title, f"# {issue.title}\n\n{issue.body or ''}"),
        rev=base_sha,
        branch=state.branch,
        trust=HeadTrust.TRUSTED,  # the default branch's tip
        subject=f"Fix #{issue.number}: {issue.title}"[:72],
    )
    run_steps(ctx, AFTER, state)
    result: dict[str, Any] = {"outcome": state.outcome, **state.change.result()}
    if state.pr is not None:
        result["pr"] = state.pr.number
        result["pull_request_url"] = state.pr.html_url
    failed = (ChangeOutcome.UNVALIDATED, ChangeOutcome.REFUSED, ChangeOutcome.NO_CHANGE)
    if state.outcome is not None and state.outcome in failed:
        raise JobFailed(state.change.report(state.outcome), **result)
    return result
