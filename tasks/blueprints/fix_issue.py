"""fix_issue: an agent's change for a labelled issue, validated, opened as the labeller's own PR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from github.Issue import Issue
from github.PullRequest import PullRequest

from app.core.kinds import Kind
from app.intake.commands import issue_digest
from tasks.agent import AgentTask, Quoted
from tasks.blueprints import Step, run_steps
from tasks.blueprints.budget import stop_at_budget
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, ChangeOutcome, configured_agent, make_change
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.blueprints.mirror_fetch import Wanted
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


# What the job says (in its status comment) when the issue is not what the labeller saw.
CHANGED = (
    "the issue changed after it was labelled; remove and re-add the label to fix it as it reads now"
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
    change.new_sha = state.work.push(change.new_sha, state.branch, lease=state.lease)
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
    work.ctx.before_write()
    if existing:
        existing[0].edit(title=title, body=body)
        return existing[0]
    pr = repo.create_pull(base=work.repo.default_branch, head=state.branch, title=title, body=body)
    work.ctx.meter.inc("pull_requests_opened", kind="fix_issue")
    return pr


def as_labelled(ctx: JobContext, work: Work, issue: Issue, pinned: str | None = None) -> str:
    """What the step says when the issue reads as it did when it was labelled; otherwise
    JobFailed, whose message asks for the label again: the job may run hours after the
    label (waiting for a sign-in, queued behind the caps), and the text must not have been
    rewritten into other instructions in between.

    The digest decides, not `updated_at`: GitHub moves an issue's `updated_at` for a new label
    or comment too (the label event's own payload already has the labelling's time,
    https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues), and it has
    one-second resolution, so an edit in the labelling's second keeps it. The issue is read
    here anyway, so comparing its text costs no extra request. A job without a recorded
    digest (recorded before onloop kept one) is treated as changed."""
    pinned = pinned or ctx.params.get("issue_sha256")
    if pinned and issue_digest(issue.title, issue.body) == pinned:
        return f"unchanged since the label ({ctx.params.get('issue_updated_at') or 'time unknown'})"
    # Said in the job's status comment, which onloop keeps as the one comment for a job's
    # notices (app.github.comments.family), as NO_AGENT is.
    raise JobFailed(CHANGED, outcome="issue_changed")


AFTER: list[Step[FixIssue]] = [Step("push", _push), Step("pr", _open_pr)]


PLAN = [
    "policy",
    "authorization",
    "issue",
    "branch",
    *(s.name for s in CHANGE_STEPS),
    *(s.name for s in AFTER),
]


def run_fix_issue(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = list(PLAN)
    found = installation_repo(ctx)
    work = begin(ctx, "fix", found)
    if configured_agent(ctx) is None:
        raise JobFailed(NO_AGENT, outcome="no_agent")
    assert ctx.job.number is not None
    issue = work.repo.get_issue(ctx.job.number)
    with ctx.step("issue") as record:
        record.output = as_labelled(ctx, work, issue)
    base_sha = work.repo.get_branch(work.repo.default_branch).commit.sha
    return fix(ctx, work, issue, base_sha)


def fix(
    ctx: JobContext,
    work: Work,
    issue: Issue,
    base_sha: str,
    *,
    resume: str | None = None,
    pinned: str | None = None,
) -> dict[str, Any]:
    """The change for `issue` over `base_sha` (from `resume`, a WIP tip, when continuing),
    pushed to its branch with a PR; a job at its daily budget stops onto its WIP branch."""
    ctx.head_sha = base_sha
    state = FixIssue(work, issue, base_sha, f"onloop/issue-{issue.number}")
    work.targets.prefetch(state.branch)  # read beside the work; the push asks for it
    work.mirror.prefetch(Wanted(resume or base_sha))  # fetched beside the branch's read
    with ctx.step("branch") as record:
        state.lease = work.branch_lease(state.branch, "remove and add the label again")
        record.output = f"replacing {state.lease[:12]}" if state.lease else "new branch"
    text = Quoted(
        f"the title and body of issue #{issue.number}, as they read when @{work.login} labelled it",
        f"# {issue.title}\n\n{issue.body or ''}",
        "markdown",
    )
    body = RESUMED if resume else ""
    state.change = make_change(
        work,
        AgentTask(Kind.FIX_ISSUE, f"Fix issue #{issue.number}", body, quoted=(text,)),
        rev=resume or base_sha,
        base=base_sha,
        branch=state.branch,
        trust=HeadTrust.TRUSTED,  # the default branch's tip, or onloop's own WIP on it
        subject=f"Fix #{issue.number}: {issue.title}"[:72],
    )
    if state.change.budget is not None:
        pinned = pinned or ctx.params.get("issue_sha256")
        stop_at_budget(state.change, state.change.budget, base_sha, issue_sha256=pinned)
    run_steps(ctx, AFTER, state)
    result: dict[str, Any] = {"outcome": state.outcome, **state.change.result()}
    if state.pr is not None:
        result["pr"] = state.pr.number
        result["pull_request_url"] = state.pr.html_url
    failed = (ChangeOutcome.UNVALIDATED, ChangeOutcome.REFUSED, ChangeOutcome.NO_CHANGE)
    if state.outcome is not None and state.outcome in failed:
        raise JobFailed(state.change.report(state.outcome), **result)
    return result


# What a continued job's agent is told, in onloop's words.
RESUMED = (
    "An earlier run of this job stopped at its daily budget. Its work so far is already "
    "committed in the workspace: continue from it and finish the task."
)
