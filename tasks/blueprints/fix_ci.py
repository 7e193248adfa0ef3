"""fix_ci: make failing checks pass: CI logs, agent, fixers, validation, push; twice at most."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github import GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository

from app.core.kinds import Kind
from app.core.markdown import inline_code
from app.github.comments import thread, upsert_comment
from tasks.agent import AgentTask, Quoted
from tasks.blueprints import Step, run_steps
from tasks.blueprints.budget import stop_at_budget
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, ChangeOutcome, make_change
from tasks.blueprints.common import Work, act_as, begin, installation_repo
from tasks.blueprints.heads import head_trust
from tasks.blueprints.mirror_fetch import Wanted
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.targets import Target
from tasks.ci.failures import FailedJob, failed_jobs
from tasks.ci.logs import excerpt
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person

log = logging.getLogger(__name__)
KIND_TRAILER = "Onloop-Kind: fix_ci"  # marks onloop's CI-fix commits for people reading them
STOP_RULE = "max_ci_fix_attempts"  # the policy rule of the cap (governance.ci_fix_attempts)


class FixOutcome(StrEnum):
    """How a CI fix ends besides what became of its change (ChangeOutcome)."""

    STOPPED = "stopped"  # `max_ci_fix_attempts` fixes since the last person's push: refused
    STALE = "stale"  # the pull request moved on from the commit whose CI failed
    NO_PR = "no_pr"  # no open pull request has that commit as its head any more


@dataclass
class FixCI:
    work: Work
    pr: PullRequest | None
    pull: PullRef | None  # `pr`'s head and base, when the fix goes to a pull request
    head_sha: str
    branch: str  # where the fix goes: the PR's head branch, or a new one off a red default
    failures: list[FailedJob] = field(default_factory=list)
    excerpt: str = ""
    change: Change | None = None
    outcome: ChangeOutcome | FixOutcome | None = None
    head: Target | None = None  # whether the PR's head branch takes onloop's push
    fix_pr: PullRequest | None = None  # the PR into a head branch that does not

    @property
    def fetch_refs(self) -> list[str]:
        return self.pull.fetch_refs if self.pull is not None else []


def trigger_sha(ctx: JobContext) -> str | None:
    """The commit whose CI failed, as delivered (the job row's head moves when onloop pushes,
    so a job that runs again must not read it back from there)."""
    return ctx.command.head_sha


def _find_pr(ctx: JobContext, repo: Repository) -> PullRequest | None:
    """The job's PR: its number, or for a fork's run (no PR listed) the open PR with this head."""
    if ctx.job.number is not None:
        return repo.get_pull(ctx.job.number)
    sha = trigger_sha(ctx)
    if ctx.params.get("default_branch") or not sha:
        return None
    for pr in repo.get_commit(sha).get_pulls():
        if pr.state == "open" and pr.head.sha == sha:
            return pr
    return None


def _read_failures(state: FixCI) -> str | None:
    ctx = state.work.ctx
    state.failures = failed_jobs(state.work.repo, ctx.params, state.head_sha, cancel=ctx.cancel)
    parts = [excerpt(failed.log).markdown(job=failed.name) for failed in state.failures]
    state.excerpt = "\n\n".join(parts)
    return ", ".join(f.name for f in state.failures) or "no failed job found"


def _change(state: FixCI) -> None:
    """The fix itself, in a sandbox on the head commit (its own recorded steps). Where the
    fix will be pushed is read meanwhile."""
    pull = state.pull
    if pull is not None and pull.can_push_to_head:
        state.work.targets.prefetch(pull.head_ref, pull.head_repo)
    title = "Make the failing checks pass"
    names = ", ".join(f.name for f in state.failures) or "checks"
    # The log is the output of the head's own code (job and step names too): data.
    quoted = (Quoted("what the failing CI jobs printed", state.excerpt, "markdown"),)
    task = AgentTask(
        Kind.FIX_CI, title, f"{title} on the commit checked out in /workspace.", quoted=quoted
    )
    if not state.excerpt:
        no_log = "No CI log was found; run the repository's checks and fix them."
        task = AgentTask(Kind.FIX_CI, title, no_log)
    state.change = make_change(
        state.work,
        task,
        rev=state.head_sha,
        branch=state.branch,
        refs=state.fetch_refs,
        trust=head_trust(state.work.repo, state.pull, state.work.config.trigger_permission),
        subject=f"Fix CI: {names}",
        trailers=[KIND_TRAILER],
    )
    if state.change.budget is not None:  # never onto the PR's own branch: its WIP branch
        stop_at_budget(state.change, state.change.budget, state.head_sha)
    state.outcome = state.change.outcome


def _push(state: FixCI) -> str | None:
    change = state.change
    if state.outcome != ChangeOutcome.READY or change is None or change.new_sha is None:
        return None
    work, pull = state.work, state.pull
    if pull is None:  # a red default branch: the fix goes to a new branch and a PR into it
        default = work.repo.default_branch
        intro = f"CI fails on `{default}` at {state.head_sha[:12]}."
        state.pr = _open_fix_pr(state, default, f"Fix the red {default} branch", intro)
        state.outcome = ChangeOutcome.PR
        return f"opened #{state.pr.number}"
    if not pull.can_push_to_head:
        state.outcome = ChangeOutcome.FORK
        return "the fork does not allow edits from maintainers: nothing pushed"
    state.head = work.push_target(pull.head_ref, pull.head_repo)
    if not state.head.allowed:  # never onto a default or protected head: a PR into it
        if pull.fork:
            raise JobFailed(state.head.message(), outcome=state.head.refusal)
        state.branch = f"onloop/fix-ci-{pull.number}-{work.ctx.job.id}"
        head = inline_code(pull.head_ref)
        intro = f"CI fails on #{pull.number} at {state.head_sha[:12]}; {head} "
        intro += f"{state.head.reason()}, so this fix waits for review here."
        title = f"Fix CI of #{pull.number} on {head}"
        state.fix_pr = _open_fix_pr(state, pull.head_ref, title, intro)
        state.outcome = ChangeOutcome.PR
        return f"{head} {state.head.reason()}: opened #{state.fix_pr.number}"
    clone_url, head_repo = pull.head_clone_url, pull.head_repo
    change.new_sha = work.push(
        change.new_sha, state.branch, lease=state.head_sha, clone_url=clone_url, head_repo=head_repo
    )
    state.outcome = ChangeOutcome.PUSHED
    return f"pushed {change.new_sha[:12]} to {state.branch}"


def _open_fix_pr(state: FixCI, base: str, title: str, intro: str) -> PullRequest:
    """Push the fix to onloop's own `state.branch` and open (or reuse, when an earlier run of
    this job opened it) the person's pull request from it into `base`."""
    work, change = state.work, state.change
    assert change is not None and change.new_sha is not None
    lease = work.branch_lease(state.branch, "ask again with a new CI run")
    change.new_sha = work.push(change.new_sha, state.branch, lease=lease)
    owner = work.repo.full_name.split("/")[0]

    def open_pr() -> PullRequest:
        repo = work.user_repo
        existing = list(repo.get_pulls(state="open", head=f"{owner}:{state.branch}"))
        if existing:
            return existing[0]
        work.ctx.before_write()
        return repo.create_pull(
            base=base,
            head=state.branch,
            title=title,
            body=change.pr_body(intro),
            maintainer_can_modify=True,
        )

    pr = as_person(work, open_pr)
    work.ctx.meter.inc("pull_requests_opened", kind="fix_ci")
    return pr


def _report(state: FixCI) -> str | None:
    work, change = state.work, state.change
    if state.pr is None:
        return state.outcome
    number = state.pr.number
    said = ""
    if state.fix_pr is not None and state.head is not None:
        said = (
            f"The head branch `{state.head.branch}` {state.head.reason()}, and onloop never "
            f"pushes to a default or protected branch, so the fix is in #{state.fix_pr.number}."
        )
    elif state.outcome == ChangeOutcome.PUSHED and change is not None:
        said = change.report(ChangeOutcome.PUSHED)
    if said:  # as the person, like the push
        work.ctx.before_write()
        as_person(
            work,
            lambda: upsert_comment(
                thread(work.user_repo, number), f"job-{work.ctx.job.id}", said, work.login
            ),
        )
    return state.outcome  # anything else is said in the job's status comment


BEFORE: list[Step[FixCI]] = [Step("failures", _read_failures)]
AFTER: list[Step[FixCI]] = [Step("push", _push), Step("report", _report)]


def _say_stopped(ctx: JobContext, repo: Repository, attempts: int) -> None:
    """The cap is reached (the policy's quiet `max_ci_fix_attempts` refusal, before any work):
    one comment on the pull request, found again by its marker and edited in place, however
    many red runs come after. The job itself says nothing more."""
    if ctx.job.number is None:
        return
    body = (
        f"onloop stopped fixing CI here: it made {attempts} automatic fix attempt(s) since "
        "the last push by a person, the most this repository allows (`max_ci_fix_attempts`). "
        "Please take a look yourself: a push of yours starts the count again, and a comment "
        "`/agent fix` asks onloop to try once more."
    )
    key, bot = f"fix-ci-stopped-{ctx.job.number}", ctx.settings.bot_login
    try:
        upsert_comment(thread(repo, ctx.job.number), key, body, bot)
    except GithubException:  # said next time; the job's record says it stopped
        log.warning("could not say that CI fixes stopped on job %s", ctx.job.id, exc_info=True)


def run_fix_ci(ctx: JobContext) -> dict[str, Any]:
    found = installation_repo(ctx)
    repo = found[1]
    pr = _find_pr(ctx, repo)
    automatic = bool(ctx.params.get("automatic"))
    if pr is None and not ctx.params.get("default_branch"):
        raise JobFailed(
            "no open pull request has this head commit any more, so there is nothing to fix",
            outcome=FixOutcome.NO_PR,
        )
    trigger = trigger_sha(ctx)
    if pr is not None and automatic and trigger and pr.head.sha != trigger:
        return {
            "outcome": FixOutcome.STALE,
            "summary": "The pull request has moved on; nothing to do.",
        }
    if pr is not None and automatic:
        act_as(ctx, pr.user.login, pr.user.id)  # automatic fixes act as the PR's author
    ctx.plan = [
        "policy",
        "authorization",
        *(s.name for s in BEFORE),
        *(s.name for s in CHANGE_STEPS),
        *(s.name for s in AFTER),
    ]
    pull = PullRef.of(pr, repo) if pr is not None else None
    head_sha = pull.head_sha if pull is not None else str(trigger)
    refs = pull.fetch_refs if pull is not None else []
    try:  # once the person may, the head is fetched beside the read of the failures
        work = begin(ctx, "fix", found, pull, prefetch=lambda: Wanted(head_sha, refs))
    except JobFailed as refused:
        if refused.result.get("rule") != STOP_RULE:
            raise
        _say_stopped(ctx, repo, refused.result.get("attempts", 0))
        raise JobFailed(refused.message, **refused.result, outcome=FixOutcome.STOPPED) from None
    ctx.head_sha = head_sha
    branch = pull.head_ref if pull is not None else f"onloop/fix-ci-{head_sha[:7]}"
    state = FixCI(work, pr, pull, head_sha, branch)
    run_steps(ctx, BEFORE, state)
    if state.outcome is None:
        _change(state)
    run_steps(ctx, AFTER, state)
    result: dict[str, Any] = {"outcome": state.outcome}
    if state.change is not None:
        result |= state.change.result()
    if state.pr is not None and state.outcome in (ChangeOutcome.PUSHED, ChangeOutcome.PR):
        result["pull_request_url"] = (state.fix_pr or state.pr).html_url
    if state.fix_pr is not None:
        result["pr"] = state.fix_pr.number
    failed = (ChangeOutcome.UNVALIDATED, ChangeOutcome.REFUSED, ChangeOutcome.FORK)
    if isinstance(state.outcome, ChangeOutcome) and state.outcome in failed:
        assert state.change is not None
        raise JobFailed(state.change.report(state.outcome), **result)
    return result
