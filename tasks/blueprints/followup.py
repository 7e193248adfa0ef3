"""Review follow-ups: reviewers' suggestions applied in the mirror, the rest of the asks to the
agent, one commit checked in the sandbox and pushed, every thread answered (and resolved)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github import GithubException
from github.PullRequest import PullRequest

from app.core.kinds import Kind
from app.core.markdown import inline_code, plain
from app.github.comments import marker
from app.github.threads import Thread, resolve_thread, review_threads
from tasks.agent import AgentTask, Quoted
from tasks.blueprints import Step, run_steps
from tasks.blueprints.budget import stop_at_budget
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import Change, ChangeOutcome, configured_agent, make_change
from tasks.blueprints.common import Work
from tasks.blueprints.heads import head_trust
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.pushes import TRAILER
from tasks.git.commit_file import commit_files, read_blob, squash
from tasks.git.patch_text import patch_text
from tasks.git.process import git
from tasks.review.requests import Remark, Requests, Skip, Suggestion, apply_all, sort_out
from tasks.runner.context import JobFailed

NEEDS_SOMEONE = (
    "This needs a person or an agent: onloop applies `suggestion` blocks by itself, and no "
    "coding agent is configured here (`ONLOOP_AGENT`)."
)


class Said(StrEnum):
    """What onloop did about one thread."""

    APPLIED = "applied"
    CHANGED = "changed"  # the agent changed the thread's file
    UNCHANGED = "unchanged"  # the agent left the thread's file alone
    SKIPPED = "skipped"  # a suggestion not applied, with why
    NEEDS_SOMEONE = "needs_someone"


@dataclass
class Followup:
    """One follow-up's state: what was asked, what was made, what was said where."""

    work: Work
    pr: PullRequest
    pull: PullRef
    kind: str
    reviewer: str
    subject: str
    requests: Requests = field(default_factory=Requests)
    review_text: str = ""  # the review's own text, when it asks for something
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    applied: list[Suggestion] = field(default_factory=list)
    suggested_sha: str | None = None  # the head with the suggestions applied
    change: Change | None = None
    new_sha: str | None = None  # the one commit to push (GitHub's, once it made it verified)
    outcome: ChangeOutcome | None = None
    answers: dict[str, Said] = field(default_factory=dict)  # thread id → what was said

    @property
    def head_sha(self) -> str:
        return self.pull.head_sha


def gather(state: Followup, *, remarks: bool) -> str | None:
    """The unresolved threads' asks (remarks too when `remarks`)."""
    work = state.work
    threads = review_threads(work.repo_client, work.repo.full_name, state.pull.number)
    bot = work.ctx.settings.bot_login or "onloop[bot]"
    state.requests = sort_out(threads, bot, remarks=remarks)
    if remarks and state.review_text.strip():
        state.requests.remarks.append(Remark(None, ()))
    r = state.requests
    return (
        f"{len(threads)} thread(s): {len(r.suggestions)} suggestion(s) to apply, "
        f"{len(r.remarks)} remark(s), {len(r.skipped)} suggestion(s) not applicable"
    )


def apply_suggestions(state: Followup) -> str | None:
    """The suggestions applied to the head's files, as a commit in the mirror."""
    work, pull = state.work, state.pull
    cache, name = work.place.cache, work.repo.full_name
    mirror = cache.ensure(
        name, work.repo.clone_url, work.install_token, sha=pull.head_sha, refs=pull.fetch_refs
    )
    modes: dict[str, str] = {}

    def read(path: str) -> bytes | None:
        found = read_blob(mirror, pull.head_sha, path)
        if found is None:
            return None
        modes[path] = found[0]
        return found[1]

    files, state.applied, skipped = apply_all(state.requests.suggestions, read)
    state.requests.skipped += skipped
    if not files:
        return "no suggestion to apply"
    state.files = {path: (modes[path], data) for path, data in files.items()}
    with cache.lock(name):
        sha = commit_files(mirror, pull.head_sha, state.files, state.subject, work.identity())
        ref = f"refs/onloop/job-{work.ctx.job.id}-suggestions"  # reachable for the sandbox
        git(["update-ref", ref, sha], mirror)
    state.suggested_sha = sha
    return f"applied {len(state.applied)} suggestion(s) in {sha[:12]}"


def _task(state: Followup) -> AgentTask:
    remarks = [r.quoted() if r.thread else state.review_text for r in state.requests.remarks]
    quoted = (Quoted("review comments on this pull request", "\n\n---\n\n".join(remarks)),)
    title = f"Address the review by @{state.reviewer}"
    body = (
        f"{title}: change the code checked out in /workspace as the review comments below ask. "
        "Each names its file and lines. Change nothing they do not ask for."
    )
    return AgentTask(Kind.ADDRESS_REVIEW, title, body, quoted=quoted)


def check_change(state: Followup) -> None:
    """The agent (for the remarks, when one is configured), the fixers and the checks, on the
    head with the suggestions applied; then one commit of it all on the head."""
    work, pull = state.work, state.pull
    has_agent = bool(state.requests.remarks) and configured_agent(work.ctx) is not None
    if not has_agent and state.suggested_sha is None:
        state.outcome = ChangeOutcome.NO_CHANGE
        return
    task = _task(state) if has_agent else AgentTask(Kind.ADDRESS_REVIEW, state.subject, "")
    change = make_change(
        work,
        task,
        rev=state.suggested_sha or pull.head_sha,
        branch=pull.head_ref,
        refs=pull.fetch_refs,
        trust=head_trust(work.repo, pull, work.config.trigger_permission),
        subject=state.subject,
        base=pull.head_sha,
        agent=has_agent,
    )
    state.change = change
    if change.budget is not None:
        stop_at_budget(change, change.budget, pull.head_sha)
    tip = change.new_sha
    if change.outcome == ChangeOutcome.NO_CHANGE and state.suggested_sha is not None:
        tip = state.suggested_sha  # the checks passed on the suggestions alone
        change.violations = work.guard(pull.head_sha, tip)
        change.outcome = ChangeOutcome.REFUSED if change.violations else ChangeOutcome.READY
    state.outcome = change.outcome
    if state.outcome != ChangeOutcome.READY or tip is None:
        return
    mirror = work.place.cache.mirror_path(work.repo.full_name)
    sha = squash(mirror, pull.head_sha, tip, _message(state), work.identity())
    violations = work.guard(pull.head_sha, sha)
    if violations:
        change.violations, state.outcome = violations, ChangeOutcome.REFUSED
        return
    state.new_sha = sha


def _message(state: Followup) -> str:
    bot = state.work.ctx.settings.bot_login or "onloop[bot]"
    trailers = [
        f"{TRAILER}: {state.work.ctx.job.id}",
        f"Onloop-Kind: {state.kind}",
        f"Co-authored-by: {bot} <{bot}@users.noreply.github.com>",
    ]
    return f"{state.subject}\n\n" + "\n".join(trailers) + "\n"


def push(state: Followup) -> str | None:
    """The one commit onto the PR's head branch, under a lease on the head it was made on."""
    work, pull = state.work, state.pull
    if state.outcome != ChangeOutcome.READY or state.new_sha is None:
        return None
    if not pull.can_push_to_head:
        state.outcome = ChangeOutcome.FORK
        return "the fork does not allow edits from maintainers: nothing pushed"
    state.new_sha = work.push(  # GitHub's sha where it made a verified commit
        state.new_sha,
        pull.head_ref,
        lease=pull.head_sha,
        clone_url=pull.head_clone_url,
        head_repo=pull.head_repo,
    )
    state.outcome = ChangeOutcome.PUSHED
    return f"pushed {state.new_sha[:12]} to {pull.head_ref}"


def _agent_paths(state: Followup) -> set[str]:
    """The files the sandbox's part of the change touched (the agent and the fixers), on
    top of the applied suggestions."""
    tip = state.change.new_sha if state.change is not None else None
    if tip is None:
        return set()
    mirror = state.work.place.cache.mirror_path(state.work.repo.full_name)
    names = ["diff", "--name-only", "-z", state.suggested_sha or state.head_sha, tip]
    return set(filter(None, git(names, mirror).stdout.split("\0")))


def _reply(state: Followup, thread: Thread, said: Said, text: str, resolve: bool) -> None:
    """Answer in the thread as onloop (once per job: a run again finds its marker there)."""
    work, root = state.work, thread.root
    tag = marker(f"job-{work.ctx.job.id}-thread")
    if root is None or any(tag in c.body for c in thread.comments):
        return
    work.ctx.before_write()
    state.pr.create_review_comment_reply(root.id, f"{tag}\n{text}")  # onloop's own (install)
    state.answers[thread.id] = said
    if resolve:
        try:
            resolve_thread(work.repo_client, thread.id)
        except GithubException:  # answered; the person resolves it
            pass


def answer(state: Followup) -> str | None:
    """What happened, in each thread; threads fully addressed are resolved."""
    pushed = state.outcome == ChangeOutcome.PUSHED and state.new_sha is not None
    short = (state.new_sha or "")[:7]
    for s in state.applied if pushed else ():
        _reply(state, s.thread, Said.APPLIED, f"Applied in {short}.", resolve=True)
    for item, why in state.requests.skipped:
        thread = item.thread if isinstance(item, Suggestion) else item
        _reply(state, thread, Said.SKIPPED, f"Not applied: {why}.", resolve=False)
    agent = state.change.agent if state.change is not None else None
    changed = _agent_paths(state) if pushed else set()
    for remark in state.requests.remarks:
        if remark.thread is None:
            continue
        if agent is None:
            _reply(state, remark.thread, Said.NEEDS_SOMEONE, NEEDS_SOMEONE, resolve=False)
        elif pushed and remark.thread.path in changed and agent.finished:
            text = f"Changed in {short} by the agent: {plain(agent.summary[:300])}"
            _reply(state, remark.thread, Said.CHANGED, text, resolve=True)
        elif pushed:
            text = (
                f"The agent changed nothing in {inline_code(remark.thread.path)} for this; "
                "it needs a person."
            )
            _reply(state, remark.thread, Said.UNCHANGED, text, resolve=False)
    return ", ".join(f"{t}: {s}" for t, s in state.answers.items()) or "nothing to answer"


def summary(state: Followup) -> str:
    """The job's outcome for its status comment."""
    lines = [f"- applied: {s.path} lines {s.start}-{s.end}" for s in state.applied]
    for item, why in state.requests.skipped:
        thread = item.thread if isinstance(item, Suggestion) else item
        lines.append(f"- not applied: {inline_code(thread.path)}: {why}")
    if state.review_text.strip() and (state.change is None or state.change.agent is None):
        lines.append("- the review's own text needs a person or an agent")
    return "\n".join(lines)


def result(state: Followup) -> dict[str, Any]:
    """The job's stored result; raises JobFailed when the change could not go out."""
    out: dict[str, Any] = {
        "outcome": state.outcome,
        "reviewer": state.reviewer,
        "applied": len(state.applied),
        "skipped": [str(why) for _, why in state.requests.skipped],
        "answered": {k: str(v) for k, v in state.answers.items()},
        "followup": summary(state),
        "new": state.new_sha if state.outcome == ChangeOutcome.PUSHED else None,
    }
    if state.change is not None:
        out |= {k: v for k, v in state.change.result().items() if k != "new"}
    if state.new_sha is not None:  # the one commit: the suggestions and the sandbox's part
        mirror = state.work.place.cache.mirror_path(state.work.repo.full_name)
        out["diff"] = patch_text(mirror, state.head_sha, state.new_sha)
    failed = (ChangeOutcome.UNVALIDATED, ChangeOutcome.REFUSED, ChangeOutcome.FORK)
    if state.change is not None and state.outcome in failed:
        assert isinstance(state.outcome, ChangeOutcome)
        raise JobFailed(state.change.report(state.outcome), **out)
    return out


PLAN = [
    "policy",
    "authorization",
    "threads",
    "suggestions",
    *(step.name for step in CHANGE_STEPS),
    "push",
    "answer",
]


def follow_up(state: Followup, *, remarks: bool) -> dict[str, Any]:
    """The whole follow-up once the job may act: the threads' asks (`remarks` too, or the
    suggestions alone), the one checked commit, the push, the answers; the job's result."""
    gathered: Step[Followup] = Step("threads", lambda s: gather(s, remarks=remarks))
    run_steps(state.work.ctx, [gathered, Step("suggestions", apply_suggestions)], state)
    check_change(state)
    run_steps(state.work.ctx, [Step("push", push), Step("answer", answer)], state)
    return result(state)


__all__ = ["PLAN", "Followup", "Skip", "follow_up"]
