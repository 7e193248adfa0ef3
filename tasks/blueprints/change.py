"""One change made in a sandbox: agent, fixers, validation, commit — each a recorded step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.core.markdown import plain
from app.policy.budgets import Line, reached
from tasks.agent import Agent, AgentConfigError, AgentResult, AgentTask, budget_from, get_agent
from tasks.blueprints import Step, run_steps
from tasks.blueprints.budget import agent_budget, record_agent, today
from tasks.blueprints.checks import Outcome, Plan, failures, plan, run_all, summary
from tasks.blueprints.common import Work
from tasks.git.patch_text import patch_text
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.steps import StepKind
from tasks.sandbox.base import Sandbox
from tasks.sandbox.trust import HeadTrust


class ChangeOutcome(StrEnum):
    """What became of a change: the first four are said by the steps here, the last three by
    the blueprint that pushes it."""

    READY = "ready"  # committed, validated and allowed: a commit to push
    NO_CHANGE = "no_change"
    UNVALIDATED = "unvalidated"  # the checks still fail
    REFUSED = "refused"  # the blast-radius rules forbid it
    PUSHED = "pushed"  # onto the pull request's own branch
    PR = "pr"  # onto a new branch, with a pull request
    FORK = "fork"  # the head is in a fork that takes no pushes from onloop


@dataclass
class Change:
    """What happened; `outcome` (once set) is ready, no_change, unvalidated or refused."""

    work: Work
    box: Sandbox
    kind: str
    task: AgentTask
    subject: str
    trailers: Sequence[str] = ()
    base: str = ""
    plan: Plan = field(default_factory=Plan)
    agent: AgentResult | None = None
    fixes: list[Outcome] = field(default_factory=list)
    validation: list[Outcome] = field(default_factory=list)
    new_sha: str | None = None
    violations: list[str] = field(default_factory=list)
    outcome: ChangeOutcome | None = None
    budget: Line | None = None  # the daily budget the agent step used up, when it did
    use_agent: bool = True  # False: the change is onloop's own (applied suggestions)
    diff: str = ""  # the committed change as text (stat and patch, capped), for its page

    def ran(self) -> str:
        """What ran, as Markdown lines."""
        lines = []
        if self.agent is not None:
            lines.append(f"- agent: {plain(self.agent.summary[:300]) or self.agent.stopped}")
        lines += [f"- fix: {line}" for line in summary(self.fixes).splitlines()]
        lines += [f"- check: {line}" for line in summary(self.validation).splitlines()]
        return "\n".join(lines) or "- nothing ran"

    def validated(self) -> str:
        if not self.plan.validation:
            return "no test or check command is configured (`checks.test` in `.github/onloop.yml`)"
        return "all checks passed" if all(o.ok for o in self.validation) else "checks failed"

    def pr_body(self, intro: str) -> str:
        return (
            f"{intro}\n\nWhat ran in onloop's sandbox:\n\n{self.ran()}\n\nResult: "
            f"{self.validated()}.\n\nonloop made this pull request for @{self.work.login}; "
            "it needs a review by someone other than its author before it merges."
        )

    def report(self, outcome: ChangeOutcome) -> str:
        """The comment for this change's outcome: what happened and what to do next."""
        if outcome in (ChangeOutcome.PUSHED, ChangeOutcome.PR):
            return (
                f"Pushed {(self.new_sha or '')[:7]}.\n\n{self.ran()}\n\nResult: {self.validated()}."
            )
        if outcome == ChangeOutcome.NO_CHANGE:
            return (
                "onloop ran the repository's fixers and found nothing to change, so nothing was "
                f"pushed.\n\n{self.ran()}\n\nThe failure likely needs a person (or an agent: "
                "set `ONLOOP_AGENT`)."
            )
        if outcome == ChangeOutcome.UNVALIDATED:
            return (
                "onloop made a change but the checks still fail in its sandbox, so nothing was "
                f"pushed.\n\n{self.ran()}\n\n{failures(self.validation)}"
            )
        if outcome == ChangeOutcome.REFUSED:
            rules = "\n".join(f"- {v}" for v in self.violations)
            return f"onloop refused to push its change:\n\n{rules}"
        if outcome == ChangeOutcome.FORK:
            return (
                "The branch lives in a fork that does not allow edits from maintainers, so "
                "onloop did not push. Tick *Allow edits by maintainers* and ask again."
            )
        return f"onloop finished with `{outcome}`."

    def result(self) -> dict[str, Any]:
        return {
            "new": self.new_sha,
            "fixes": [o.command for o in self.fixes],
            "checks": {o.command: o.result.exit_code for o in self.validation},
            "violations": self.violations,
            "diff": self.diff,
        }


def _plan(change: Change) -> str | None:
    change.plan = plan(change.box, change.work.config)
    return f"fix: {change.plan.fix}; validate: {change.plan.validation}"


def _agent(change: Change) -> str | None:
    if not change.use_agent:
        return "not needed"
    agent = configured_agent(change.work.ctx)
    if agent is None:
        return "no agent configured"
    ctx, config = change.work.ctx, change.work.config
    allowed = agent_budget(ctx, config, budget_from(ctx.settings))
    change.agent = agent.run(change.box, change.task, allowed, ctx.cancel)
    record_agent(ctx, change.agent)
    if not change.agent.finished:
        change.budget = reached(today(ctx, config))
    return f"{change.agent.stopped}: {change.agent.summary}\n{change.agent.transcript_tail}"


def configured_agent(ctx: JobContext) -> Agent | None:
    """The agent ONLOOP_AGENT names (None for `none`); a half-configured one fails the job."""
    try:
        return get_agent(ctx.settings)
    except AgentConfigError as exc:
        raise JobFailed(f"the coding agent is not fully configured: {exc}") from None


def _fixers(change: Change) -> str | None:
    if change.budget is not None:
        return "not run: the daily budget is used up"
    change.fixes = run_all(change.box, change.plan.fix)
    return summary(change.fixes) or "no fixers"


def _validate(change: Change) -> str | None:
    change.validation, said = run_required(change, change.plan.validation)
    return said


def run_required(change: Change, commands: list[str]) -> tuple[list[Outcome], str]:
    """Run `commands` in the sandbox: their outcomes and what the step says; one that fails
    leaves the change unvalidated. Not run once the daily budget is used up."""
    if change.budget is not None:
        return [], "not run: the daily budget is used up"
    outcomes = run_all(change.box, commands)
    if not all(o.ok for o in outcomes):
        change.outcome = ChangeOutcome.UNVALIDATED
    return outcomes, summary(outcomes) + "\n" + failures(outcomes)


def _commit(change: Change) -> str | None:
    if change.outcome is not None:
        return None
    work = change.work
    if not work.commit(
        change.box, change.subject, trailers=change.trailers, bundle_since=change.base
    ):
        change.outcome = ChangeOutcome.NO_CHANGE
        return "nothing changed"
    change.new_sha = work.collect(change.box, change.base, bundled=True)
    if change.new_sha is None:
        change.outcome = ChangeOutcome.NO_CHANGE
        return "nothing to collect"
    change.violations = change.work.guard(change.base, change.new_sha)
    mirror = change.work.place.cache.mirror_path(change.work.repo.full_name)
    change.diff = patch_text(mirror, change.base, change.new_sha)
    change.outcome = ChangeOutcome.REFUSED if change.violations else ChangeOutcome.READY
    return "\n".join(change.violations) or f"committed {(change.new_sha or '')[:12]}"


STEPS: list[Step[Change]] = [
    Step("plan", _plan),
    Step("agent", _agent, kind=StepKind.AGENT),
    Step("fixers", _fixers),
    Step("validate", _validate),
    Step("commit", _commit),
]


def make_change(
    work: Work,
    task: AgentTask,
    *,
    rev: str,
    branch: str,
    subject: str,
    trust: HeadTrust,
    refs: Sequence[str] = (),
    trailers: Sequence[str] = (),
    base: str | None = None,
    agent: bool = True,
    steps: Sequence[Step[Change]] = STEPS,
) -> Change:
    """Check out `rev` in a sandbox (`trust`: of the code at `rev`) and run the steps; the
    sandbox is gone afterwards. `base` (default: `rev`) is what the guard checks the change
    against: a continued job's is where the first run began. `agent` False: no agent step.
    `steps`: a blueprint's own (a campaign's commands instead of the repository's fixers)."""
    with work.sandbox(rev, trust=trust, branch=branch, refs=refs) as js:
        start = base or js.sha
        change = Change(work, js.sandbox, task.kind, task, subject, trailers, base=start)
        change.use_agent = agent
        run_steps(work.ctx, steps, change)
    return change
