"""run_fixers: a `fixers` schedule's slot: the repository's fixers on the default branch's tip
in the sandbox, opened as the schedule owner's PR when they changed anything."""

from __future__ import annotations

from typing import Any

from github.PullRequest import PullRequest

from app.core.kinds import Kind
from tasks.agent import AgentTask
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, ChangeOutcome, make_change
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person
from tasks.sandbox.trust import HeadTrust

NOTHING = "nothing_to_change"  # the outcome of a run whose fixers changed nothing
WAITING = "earlier_pr_open"  # an earlier slot's pull request is still open: nothing run
PLAN = ["policy", "authorization", "earlier", *(s.name for s in CHANGE_STEPS), "push", "pr"]


def _earlier(work: Work, prefix: str) -> PullRequest | None:
    """An open pull request of an earlier slot of this schedule: the next one waits for it
    to be merged or closed rather than opening another beside it."""
    for pr in work.repo.get_pulls(state="open"):
        head_repo = pr.head.repo  # None once a fork is deleted
        if pr.head.ref.startswith(prefix) and head_repo is not None:
            if head_repo.full_name == work.repo.full_name:
                return pr
    return None


def _open_pr(work: Work, change: Change, branch: str, schedule: str) -> PullRequest:
    """The owner's pull request from `branch`, with their token (as a person's own job)."""

    def create() -> PullRequest:
        work.ctx.before_write()
        return work.user_repo.create_pull(
            base=work.repo.default_branch,
            head=branch,
            title=f"Run the fixers (schedule {schedule})",
            body=change.pr_body(
                f"The `{schedule}` schedule of `.github/onloop.yml` ran the repository's "
                "fixers on the default branch, and they changed what is below."
            ),
            maintainer_can_modify=True,
        )

    pr = as_person(work, create)
    work.ctx.meter.inc("pull_requests_opened", kind=Kind.RUN_FIXERS)
    return pr


def run_fixers(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = list(PLAN)
    work = begin(ctx, "fix", installation_repo(ctx))
    schedule = str(ctx.params.get("schedule") or "fixers")
    prefix = f"onloop/schedule-{schedule}-"
    with ctx.step("earlier") as record:
        earlier = _earlier(work, prefix)
        record.output = f"#{earlier.number} is still open" if earlier else "none open"
    if earlier is not None:
        return {"outcome": WAITING, "pr": earlier.number, "summary": record.output}
    base_sha = work.repo.get_branch(work.repo.default_branch).commit.sha
    ctx.head_sha = base_sha
    branch = f"{prefix}{ctx.job.id}"  # a branch of this job's own: nobody else's work
    task = AgentTask(Kind.RUN_FIXERS, "Run the fixers", "Run the repository's fixers.")
    change = make_change(
        work,
        task,
        rev=base_sha,
        branch=branch,
        subject=f"Run the fixers (schedule {schedule})",
        trust=HeadTrust.TRUSTED,  # the default branch's tip
        agent=False,
    )
    result: dict[str, Any] = {"outcome": change.outcome, **change.result()}
    if change.outcome == ChangeOutcome.NO_CHANGE:
        return {**result, "outcome": NOTHING, "summary": "The fixers found nothing to change."}
    if change.outcome != ChangeOutcome.READY or change.new_sha is None:
        raise JobFailed(change.report(change.outcome or ChangeOutcome.NO_CHANGE), **result)
    with ctx.step("push") as record:
        change.new_sha = work.push(change.new_sha, branch, lease=work.branch_lease(branch, ""))
        record.output = f"pushed {change.new_sha[:12]} to {branch}"
    with ctx.step("pr") as record:
        pr = _open_pr(work, change, branch, schedule)
        record.output = f"#{pr.number}"
    return {**result, "outcome": ChangeOutcome.PR, "pr": pr.number, "pull_request_url": pr.html_url}
