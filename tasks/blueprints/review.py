"""review_pr: lint a PR's head in the sandbox, post one review (never APPROVE) as its requester."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import update

from app.core.kinds import Kind
from app.core.markdown import defang
from app.store.models import Job
from tasks.agent import AgentConfigError, AgentTask, Quoted, budget_from, get_agent
from tasks.blueprints import Step, run_steps
from tasks.blueprints.common import begin, installation_repo
from tasks.blueprints.heads import head_trust
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.review_post import existing_review, post
from tasks.blueprints.review_state import Review
from tasks.git.process import git
from tasks.review.diff import DIFF_OPTIONS, changed_lines, parse_diff
from tasks.review.findings import (
    applicable,
    detect,
    fixers,
    run_fixers,
    run_linters,
)
from tasks.review.suggest import ReviewComment, edits_from
from tasks.runner.context import Cancelled, JobContext
from tasks.runner.steps import StepKind

MAX_DIFF_FOR_AGENT = 30_000


def _mirror_git(state: Review, args: Sequence[str]) -> str:
    cache, name = state.work.place.cache, state.work.repo.full_name
    with cache.lock(name, shared=True):
        return git(list(args), cache.mirror_path(name)).stdout


def _head_lines(state: Review, path: str) -> list[str]:
    return _mirror_git(state, ["cat-file", "blob", f"{state.head_sha}:{path}"]).splitlines()


def _diff(state: Review) -> str | None:
    """The PR's changed lines: `git diff` from the merge base, in the worker's mirror (the
    same three-dot diff GitHub shows and checks review comments against)."""
    work, name, refs = state.work, state.work.repo.full_name, state.pull.fetch_refs
    work.place.cache.ensure(
        name,
        work.repo.clone_url,
        work.install_token,
        sha=state.head_sha,
        refs=refs,
        also=[state.base_sha],
    )
    base = _mirror_git(state, ["merge-base", state.base_sha, state.head_sha]).strip()
    state.diff = _mirror_git(state, [*DIFF_OPTIONS, base, state.head_sha])
    state.changed = changed_lines(parse_diff(state.diff))
    state.existing = existing_review(state)
    added = sum(len(lines) for lines in state.changed.right.values())
    found = f"; already reviewed: {state.existing.html_url}" if state.existing else ""
    return f"{len(state.changed.paths)} files with {added} added or changed lines{found}"


def _sandbox(state: Review) -> str | None:
    if state.existing or not state.changed.paths:
        return "not needed"
    work = state.work
    trust = head_trust(work.repo, state.pull, work.config.trigger_permission)
    sandbox = work.sandbox(state.head_sha, trust=trust, refs=state.pull.fetch_refs)
    js = state.stack.enter_context(sandbox)
    state.box = js.sandbox
    state.stack.enter_context(state.ctx.cancel_watch(js.sandbox.stop))
    return f"sandbox on {state.head_sha[:12]} ({js.image})"


def _lint(state: Review) -> str | None:
    if state.box is None:
        return "not needed"
    state.detected = detect(state.exec)
    state.chosen = applicable(state.detected, state.changed.paths)
    state.findings, state.runs = run_linters(state.exec, state.chosen)
    lines = [r.summary() for r in state.runs] or ["no linter applies to the changed files"]
    return "\n".join(lines) + "\n" + "\n".join(f"--- {r.name}\n{r.output}" for r in state.runs)


def _agent(state: Review) -> str | None:
    if state.box is None:
        return "not needed"
    try:
        agent = get_agent(state.ctx.settings)
    except AgentConfigError as exc:
        state.agent_note = f"The agent did not run: {exc}."
        return state.agent_note
    if agent is None:
        return "no agent configured"
    number, author = state.pr.number, state.pr.user.login
    # The title, description, file names and diff are all the PR author's words: data.
    quoted = (
        Quoted(
            f"the title and description of pull request #{number}, written by @{author}",
            f"# {state.pr.title}\n\n{state.pr.body or ''}",
            "markdown",
        ),
        Quoted("the files the pull request changes, one per line", "\n".join(state.changed.paths)),
        Quoted("the pull request's diff", state.diff[:MAX_DIFF_FOR_AGENT], "diff"),
    )
    task = AgentTask(
        Kind.REVIEW_PR, f"Review pull request #{number}", "", read_only=True, quoted=quoted
    )
    result = agent.run(state.box, task, budget_from(state.ctx.settings), state.ctx.cancel)
    if state.ctx.cancel.is_set():
        raise Cancelled()
    for f in result.findings:
        path = f.path.removeprefix("/workspace/").removeprefix("./")
        state.agent_comments.append(ReviewComment(path, int(f.line), defang(f.body)))
    state.agent_note = defang(result.summary.strip()[:2000])  # agent text: it mentions nobody
    return f"{result.stopped}: {len(result.findings)} findings\n{result.transcript_tail}"


def _fixers(state: Review) -> str | None:
    if state.box is None:
        return "not needed"
    commands = fixers(state.detected, state.chosen, state.work.config.checks.fix)
    state.fixer_runs = run_fixers(state.exec, commands)
    fixed = state.exec(["git", *DIFF_OPTIONS, "HEAD", "--", *state.changed.paths])
    files = [f for f in parse_diff(fixed.stdout) if f.path in state.changed.right]
    state.edits = edits_from(files, lambda path: _head_lines(state, path), state.changed)
    state.stack.close()  # the sandbox is not needed any more
    state.box = None
    names = ", ".join(r.command for r in state.fixer_runs) or "none"
    return f"fixers: {names}; {len(state.edits)} changed hunks"


def plan(agent: bool) -> list[str]:
    steps = ["diff", "sandbox", "lint", *(["agent"] if agent else []), "fixers", "review"]
    return ["policy", "authorization", *steps]


def run_review(ctx: JobContext) -> dict[str, Any]:
    agent = ctx.settings.agent != "none"
    ctx.plan = plan(agent)
    assert ctx.job.number is not None
    found = installation_repo(ctx)
    pr = found[1].get_pull(ctx.job.number)
    pull = PullRef.of(pr, found[1])
    work = begin(ctx, "review", found, pull)
    state = Review(work, pr, pull, base_sha=pr.base.sha)
    ctx.head_sha = state.head_sha
    with ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == ctx.job.id).values(head_sha=state.head_sha))
    steps: list[Step[Review]] = [
        Step("diff", _diff),
        Step("sandbox", _sandbox),
        Step("lint", _lint),
        *([Step("agent", _agent, kind=StepKind.AGENT)] if agent else []),
        Step("fixers", _fixers),
        Step("review", post),
    ]
    with state.stack:
        run_steps(ctx, steps, state)
    assert state.posted is not None  # the last step posts (or finds) the review
    return {
        **state.posted.to_json(),
        "head": state.head_sha,
        "conclusion": "neutral" if state.posted.comments else "success",
    }
