"""fix_ci: make failing checks pass: CI logs, agent, fixers, validation, push; twice at most."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from github.PullRequest import PullRequest

from app.core.kinds import Kind
from app.core.telemetry import telemetry
from app.github.comments import upsert_comment
from tasks.agent import AgentTask
from tasks.blueprints import Step, run_steps
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, make_change
from tasks.blueprints.common import Session, act_as, begin, installation_repo
from tasks.ci.failures import FailedJob, failed_jobs
from tasks.ci.logs import excerpt
from tasks.git.process import git
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person

KIND_TRAILER = "Onloop-Kind: fix_ci"  # counts onloop's CI-fix commits on a branch


@dataclass
class FixCI:
    job: Session
    pr: PullRequest | None
    head_sha: str
    branch: str  # where the fix goes: the PR's head branch, or a new one off a red default
    failures: list[FailedJob] = field(default_factory=list)
    excerpt: str = ""
    attempts: int = 0
    change: Change | None = None
    outcome: str = ""

    @property
    def fork(self) -> bool:
        head = self.pr.head.repo if self.pr else None
        return self.pr is not None and (head is None or head.full_name != self.job.repo.full_name)


def trigger_sha(ctx: JobContext) -> str | None:
    """The commit whose CI failed, as delivered (the job row's head moves when onloop pushes,
    so a job that runs again must not read it back from there)."""
    sha = ctx.command.get("head_sha")
    return str(sha) if sha else None


def _find_pr(ctx: JobContext, repo: Any) -> PullRequest | None:
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


def _count_attempts(state: FixCI) -> str | None:
    """onloop's own CI-fix commits on the branch, counted by their trailer in the mirror."""
    job, place = state.job, state.job.place
    refs = [f"refs/pull/{state.pr.number}/head"] if state.pr and state.fork else []
    mirror = place.cache.ensure(
        job.repo.full_name, job.repo.clone_url, job.install_token, sha=state.head_sha, refs=refs
    )
    base = state.pr.base.ref if state.pr else job.repo.default_branch
    counted = git(
        ["rev-list", "--count", f"--grep=^{KIND_TRAILER}$", state.head_sha, "--not", base],
        mirror,
        check=False,
    )
    state.attempts = int(counted.stdout.strip() or 0) if counted.returncode == 0 else 0
    limit = job.config.max_ci_fix_attempts
    if state.attempts >= limit:
        state.outcome = "stopped"
    return f"{state.attempts} earlier fix commit(s); at most {limit}"


def _read_failures(state: FixCI) -> str | None:
    ctx = state.job.ctx
    state.failures = failed_jobs(state.job.repo, ctx.params, state.head_sha, cancel=ctx.cancel)
    parts = [excerpt(failed.log).markdown(job=failed.name) for failed in state.failures]
    state.excerpt = "\n\n".join(parts)
    return ", ".join(f.name for f in state.failures) or "no failed job found"


def _change(state: FixCI) -> None:
    """The fix itself, in a sandbox on the head commit (its own recorded steps)."""
    title = f"Make the failing checks pass on `{state.branch}`"
    body = state.excerpt or "No CI log was found; run the repository's checks and fix them."
    names = ", ".join(f.name for f in state.failures) or "checks"
    state.change = make_change(
        state.job,
        AgentTask(Kind.FIX_CI, title, f"{title}.\n\nThe failing CI jobs said:\n\n{body}"),
        rev=state.head_sha,
        branch=state.branch,
        refs=[f"refs/pull/{state.pr.number}/head"] if state.pr and state.fork else [],
        subject=f"Fix CI: {names}",
        trailers=[KIND_TRAILER],
    )
    state.outcome = state.change.outcome


def _push(state: FixCI) -> str | None:
    change = state.change
    if state.outcome != "ready" or change is None or change.new_sha is None:
        return None
    job = state.job
    if state.pr is not None:
        head_repo = state.pr.head.repo
        if state.fork and (head_repo is None or not state.pr.maintainer_can_modify):
            state.outcome = "fork"
            return "the fork does not allow edits from maintainers: nothing pushed"
        assert head_repo is not None
        job.push(change.new_sha, state.branch, lease=state.head_sha, clone_url=head_repo.clone_url)
        state.outcome = "pushed"
        return f"pushed {change.new_sha[:12]} to {state.branch}"
    lease = job.branch_lease(state.branch, "ask again with a new CI run")
    job.push(change.new_sha, state.branch, lease=lease)
    default = job.repo.default_branch
    owner = job.repo.full_name.split("/")[0]

    def open_pr() -> PullRequest:  # an earlier run's PR for the branch is reused
        repo = job.user_repo
        existing = list(repo.get_pulls(state="open", head=f"{owner}:{state.branch}"))
        if existing:
            return existing[0]
        return repo.create_pull(
            base=default,
            head=state.branch,
            title=f"Fix the red {default} branch",
            body=change.pr_body(f"CI fails on `{default}` at {state.head_sha[:12]}."),
            maintainer_can_modify=True,
        )

    pr = as_person(job, open_pr)
    state.pr, state.outcome = pr, "pr"
    telemetry(job.ctx.settings.redis_url).inc("pull_requests_opened", kind="fix_ci")
    return f"opened #{pr.number}"


def _report(state: FixCI) -> str | None:
    job, change = state.job, state.change
    if state.pr is None:
        return state.outcome
    number, bot = state.pr.number, job.ctx.settings.bot_login
    if state.outcome == "stopped":
        shown = state.excerpt[-6000:] or "(no log was found)"
        last = f"<details><summary>The last failure</summary>\n\n{shown}\n</details>"
        body = (
            f"onloop stopped fixing CI here: it already made {state.attempts} fix commit(s), "
            f"the most this repository allows (`max_ci_fix_attempts`). Please take a look "
            f"yourself; `/agent fix` will not try again on this pull request.\n\n{last}"
        )
        upsert_comment(job.repo.get_issue(number), f"fix-ci-stopped-{number}", body, bot)
        return state.outcome
    if state.outcome == "pushed" and change is not None:  # in the person's name, like the push
        as_person(
            job,
            lambda: upsert_comment(
                job.user_repo.get_issue(number),
                f"job-{job.ctx.job.id}",
                change.report(state.outcome),
                job.login,
            ),
        )
    return state.outcome  # anything else is said in the job's status comment


BEFORE: list[Step[FixCI]] = [Step("failures", _read_failures), Step("attempts", _count_attempts)]
AFTER: list[Step[FixCI]] = [Step("push", _push), Step("report", _report)]


def run_fix_ci(ctx: JobContext) -> dict[str, Any]:
    found = installation_repo(ctx)
    repo = found[1]
    pr = _find_pr(ctx, repo)
    automatic = bool(ctx.params.get("automatic"))
    if pr is None and not ctx.params.get("default_branch"):
        raise JobFailed(
            "no open pull request has this head commit any more, so there is nothing to fix",
            outcome="no_pr",
        )
    trigger = trigger_sha(ctx)
    if pr is not None and automatic and trigger and pr.head.sha != trigger:
        return {"outcome": "stale", "summary": "The pull request has moved on; nothing to do."}
    if pr is not None and automatic:
        act_as(ctx, pr.user.login, pr.user.id)  # automatic fixes act as the PR's author
    ctx.plan = [
        "policy",
        "authorization",
        *(s.name for s in BEFORE),
        *(s.name for s in CHANGE_STEPS),
        *(s.name for s in AFTER),
    ]
    session = begin(ctx, "fix", found, pr)
    head_sha = pr.head.sha if pr is not None else str(trigger)
    ctx.head_sha = head_sha
    branch = pr.head.ref if pr is not None else f"onloop/fix-ci-{head_sha[:7]}"
    state = FixCI(session, pr, head_sha, branch)
    run_steps(ctx, BEFORE, state)
    if not state.outcome:
        _change(state)
    run_steps(ctx, AFTER, state)
    result: dict[str, Any] = {"outcome": state.outcome, "attempts": state.attempts}
    if state.change is not None:
        result |= state.change.result()
    if state.pr is not None and state.outcome in ("pushed", "pr"):
        result["pull_request_url"] = state.pr.html_url
    if state.outcome in ("unvalidated", "refused", "fork"):
        assert state.change is not None
        raise JobFailed(state.change.report(state.outcome), **result)
    return result
