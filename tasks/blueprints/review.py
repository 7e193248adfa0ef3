"""review_pr: lint a PR's head in the sandbox, post one review (never APPROVE) as its requester."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github import GithubException
from github.PullRequest import PullRequest
from github.PullRequestReview import PullRequestReview
from sqlalchemy import update

from app.core.kinds import Kind
from app.github.comments import details, marker
from app.store.models import Job
from tasks.agent import AgentConfigError, AgentTask, budget_from, get_agent
from tasks.blueprints import Step, run_steps
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.blueprints.pulls import PullRef
from tasks.git.process import git
from tasks.review.diff import DIFF_OPTIONS, ChangedLines, changed_lines, parse_diff
from tasks.review.findings import (
    Detected,
    Finding,
    ToolRun,
    applicable,
    detect,
    fixers,
    label,
    run_fixers,
    run_linters,
)
from tasks.review.suggest import Built, Edit, ReviewComment, build_comments, edits_from
from tasks.runner.context import Cancelled, JobContext
from tasks.runner.people import as_person
from tasks.runner.steps import StepKind
from tasks.sandbox.base import ExecResult, Sandbox, SandboxError

MAX_DIFF_FOR_AGENT = 30_000


class ReviewEvent(StrEnum):
    """The review events onloop posts (it never approves: tests/e2e/test_never_merges.py)."""

    COMMENT = "COMMENT"
    REQUEST_CHANGES = "REQUEST_CHANGES"


@dataclass(frozen=True)
class Posted:
    """The review onloop posted, or the one it found already posted on this head."""

    review_id: int
    review_url: str
    already: bool = False
    event: ReviewEvent | None = None
    comments: int = 0
    suggestions: int = 0
    findings: int = 0
    left_out: int = 0  # findings and fixes on lines the pull request did not change

    def to_json(self) -> dict[str, Any]:
        """Its part of the job's result (tasks.feedback.progress reads it)."""
        found: dict[str, Any] = {"review_id": self.review_id, "review_url": self.review_url}
        if self.already:
            return {**found, "already": True}
        return {
            **found,
            "event": self.event,
            "comments": self.comments,
            "suggestions": self.suggestions,
            "findings": self.findings,
            "left_out": self.left_out,
        }


@dataclass
class Review:
    work: Work
    pr: PullRequest
    pull: PullRef
    base_sha: str
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    box: Sandbox | None = None
    diff: str = ""
    changed: ChangedLines = field(default_factory=ChangedLines)
    existing: PullRequestReview | None = None
    detected: Detected = field(default_factory=Detected)
    chosen: dict[str, list[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    runs: list[ToolRun] = field(default_factory=list)
    fixer_runs: list[ToolRun] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    agent_comments: list[ReviewComment] = field(default_factory=list)
    agent_note: str = ""
    built: Built = field(default_factory=Built)
    posted: Posted | None = None

    @property
    def ctx(self) -> JobContext:
        return self.work.ctx

    @property
    def head_sha(self) -> str:
        return self.pull.head_sha

    @property
    def tag(self) -> str:
        """The hidden marker of onloop's review of this head."""
        return marker(f"review:{self.head_sha}")

    def exec(self, cmd: Sequence[str] | str) -> ExecResult:
        """A command in the sandbox; Cancelled when the job was cancelled meanwhile (the
        cancel watch stops the sandbox, which ends the command)."""
        assert self.box is not None
        try:
            done = self.box.exec(cmd)
        except SandboxError:
            if self.ctx.cancel.is_set():
                raise Cancelled() from None
            raise
        if self.ctx.cancel.is_set():
            raise Cancelled()
        return done


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
    for sha in (state.head_sha, state.base_sha):
        work.place.cache.ensure(name, work.repo.clone_url, work.install_token, sha=sha, refs=refs)
    base = _mirror_git(state, ["merge-base", state.base_sha, state.head_sha]).strip()
    state.diff = _mirror_git(state, [*DIFF_OPTIONS, base, state.head_sha])
    state.changed = changed_lines(parse_diff(state.diff))
    state.existing = _existing_review(state)
    added = sum(len(lines) for lines in state.changed.right.values())
    found = f"; already reviewed: {state.existing.html_url}" if state.existing else ""
    return f"{len(state.changed.paths)} files with {added} added or changed lines{found}"


def _existing_review(state: Review) -> PullRequestReview | None:
    """This person's onloop review of this head, if there is one (asked twice: one review)."""
    pr = as_person(state.work, lambda: state.work.user_repo.get_pull(state.pull.number))
    for review in pr.get_reviews():
        if (
            review.user is not None
            and review.user.login == state.work.login
            and review.commit_id == state.head_sha
            and state.tag in (review.body or "")
        ):
            return review
    return None


def _sandbox(state: Review) -> str | None:
    if state.existing or not state.changed.paths:
        return "not needed"
    js = state.stack.enter_context(state.work.sandbox(state.head_sha, refs=state.pull.fetch_refs))
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
    body = (
        f"{state.pr.body or ''}\n\nThe pull request changes these files: "
        + ", ".join(f"`{p}`" for p in state.changed.paths)
        + f"\n\n```diff\n{state.diff[:MAX_DIFF_FOR_AGENT]}\n```"
    )
    task = AgentTask(Kind.REVIEW_PR, f"#{state.pr.number}: {state.pr.title}", body, read_only=True)
    result = agent.run(state.box, task, budget_from(state.ctx.settings), state.ctx.cancel)
    if state.ctx.cancel.is_set():
        raise Cancelled()
    for f in result.findings:
        path = f.path.removeprefix("/workspace/").removeprefix("./")
        state.agent_comments.append(ReviewComment(path, int(f.line), f.body))
    state.agent_note = result.summary.strip()[:2000]
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


def _post(state: Review) -> str | None:
    if state.existing is not None:
        state.posted = Posted(state.existing.id, state.existing.html_url, already=True)
        return f"already reviewed: {state.existing.html_url}"
    names = [label(c) for c in fixers(state.detected, state.chosen, state.work.config.checks.fix)]
    state.built = build_comments(
        state.findings, state.edits, state.changed, names, state.agent_comments
    )
    review, comments, event = as_person(state.work, lambda: _publish(state))
    state.posted = Posted(
        review.id,
        review.html_url,
        event=event,
        comments=len(comments),
        suggestions=sum("suggestion\n" in c.body for c in comments),
        findings=len(state.findings),
        left_out=state.built.outside + state.built.fixes_outside,
    )
    return f"{event} with {len(comments)} comments: {review.html_url}"


def _publish(state: Review) -> tuple[PullRequestReview, list[ReviewComment], ReviewEvent]:
    """One review with the person's token: COMMENT, or REQUEST_CHANGES where the repository
    allows it; never APPROVE. Comments this person already has on the PR are not repeated."""
    work = state.work
    repo = work.user_repo
    pr = repo.get_pull(state.pull.number)
    present = {
        (c.path, c.line, c.body)
        for c in pr.get_review_comments()
        if c.user is not None and c.user.login == work.login
    }
    comments = [c for c in state.built.comments if (c.path, c.line, c.body) not in present]
    event = ReviewEvent.COMMENT
    if work.config.review.request_changes and comments and pr.user.login != work.login:
        event = ReviewEvent.REQUEST_CHANGES  # GitHub refuses it on one's own pull request
    commit = repo.get_commit(state.head_sha)
    try:
        review = pr.create_review(
            commit=commit,
            body=_body(state, comments),
            event=event,
            comments=[c.api() for c in comments],  # type: ignore[misc]
        )
    except GithubException as exc:
        if exc.status != 422 or not comments:
            raise
        # "Pull request review thread line must be part of the diff": the PR moved under us.
        # Say it all in the review's body instead of inline.
        listed = "\n\n".join(f"`{c.path}` line {c.line}:\n{c.body}" for c in comments)
        body = _body(state, []) + "\n\nOn the lines changed:\n\n" + listed[:50_000]
        review = pr.create_review(commit=commit, body=body, event=event)
        comments = []
    return review, comments, event


def _body(state: Review, comments: Sequence[ReviewComment]) -> str:
    built, runs = state.built, state.runs
    suggested = sum("suggestion\n" in c.body for c in comments)
    lines = [state.tag]
    if not runs:
        lines.append(
            "onloop found no linter for the files this pull request changes (it runs ruff, "
            "mypy and eslint where the repository uses them, and `checks.fix` from "
            "`.github/onloop.yml`)."
        )
    elif not comments:
        lines.append(
            f"onloop found nothing to remark on the lines changed up to {state.head_sha[:7]}."
        )
    else:
        lines.append(
            f"onloop left {len(comments)} comment{'s' * (len(comments) != 1)} on the lines "
            f"changed up to {state.head_sha[:7]}"
            + (f", {suggested} with a fix you can commit from the comment." if suggested else ".")
        )
    lines += [f"- {r.summary()}" for r in runs]
    if built.outside or built.fixes_outside:
        lines.append(
            f"\n{built.outside + built.fixes_outside} more findings or fixes concern lines this "
            "pull request did not change; onloop leaves those alone."
        )
    if built.omitted:
        lines.append(f"{built.omitted} further comments were left out to keep this readable.")
    if state.agent_note:
        lines.append(f"\n{state.agent_note}")
    failed = [r for r in [*runs, *state.fixer_runs] if r.error or r.exit_code not in (0, 1)]
    for r in failed:
        lines.append(details(f"{r.name} output (exit code {r.exit_code})", r.output))
    return "\n".join(lines)


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
        Step("review", _post),
    ]
    with state.stack:
        run_steps(ctx, steps, state)
    assert state.posted is not None  # the last step posts (or finds) the review
    return {
        **state.posted.to_json(),
        "head": state.head_sha,
        "conclusion": "neutral" if state.posted.comments else "success",
    }
