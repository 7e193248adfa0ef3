"""rebase_pr: rebase a PR's head onto its base tip in the sandbox, push with the person's token."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github.PullRequest import PullRequest
from sqlalchemy import update

from app.core.markdown import fenced, inline_code
from app.github.comments import details, upsert_comment
from app.store.models import Job
from tasks.blueprints import Step, run_steps
from tasks.blueprints.common import Work, begin
from tasks.blueprints.heads import head_trust
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.rebase_verified import rebase_on_verified
from tasks.git.process import GitError
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person


class RebaseOutcome(StrEnum):
    PUSHED = "pushed"
    UP_TO_DATE = "up_to_date"
    CONFLICTS = "conflicts"  # the branch is untouched
    PATCH = "patch"  # onloop may not push to the fork: the patch is in a comment
    REFUSED = "refused"  # the guard refused the rebased commits: nothing pushed


@dataclass
class Rebase:
    work: Work
    pr: PullRequest
    pull: PullRef
    base_sha: str = ""
    new_sha: str | None = None
    conflicts: list[str] = field(default_factory=list)
    patch: str = ""
    outcome: RebaseOutcome | None = None
    violations: list[str] = field(default_factory=list)

    @property
    def head_sha(self) -> str:
        return self.pull.head_sha


def _rebase_in_sandbox(state: Rebase) -> str | None:
    work, pull = state.work, state.pull
    env = work.identity()
    trust = head_trust(work.repo, pull, work.config.trigger_permission)
    # No setup: a rebase needs no dependencies, and setup would run the PR head's code
    # (`pip install -e .` runs its setup.py) in the sandbox that then rebases. The replay
    # check (tasks/git/replay.py) ignores white space and where a hunk sits, so it must not
    # be the only thing between that code and a push under the maintainer's name.
    with work.sandbox(
        state.head_sha, trust=trust, refs=pull.fetch_refs, branch=pull.head_ref, setup=False
    ) as js:
        box = js.sandbox
        git = ["git", "-c", "rerere.enabled=true", "-c", "core.editor=true"]
        done = box.exec([*git, "rebase", "--no-autosquash", state.base_sha], env=env)
        if not done.ok:
            # NUL-separated: a name may hold spaces or line breaks (and -z leaves it unquoted)
            listed = box.exec(["git", "diff", "--name-only", "--diff-filter=U", "-z"])
            state.conflicts = sorted({name for name in listed.stdout.split("\0") if name})
            box.exec(["git", "rebase", "--abort"])
            # Conflicts that are only about white space are safe to settle by ignoring it.
            done = box.exec(
                [*git, "rebase", "--no-autosquash", "-X", "ignore-space-change", state.base_sha],
                env=env,
            )
            if not done.ok:
                box.exec(["git", "rebase", "--abort"])
                state.outcome = RebaseOutcome.CONFLICTS
                return "conflicts: " + ", ".join(state.conflicts)
        state.conflicts = []
        state.new_sha = work.collect(box, state.base_sha)
        if pull.fork and state.new_sha:  # in case onloop cannot push to the fork
            patch = box.exec(["git", "format-patch", "--stdout", f"{state.base_sha}..HEAD"])
            state.patch = patch.stdout
    return (
        f"rebased onto {state.base_sha[:12]}: {state.head_sha[:12]} -> {(state.new_sha or '')[:12]}"
    )


def _push(state: Rebase) -> str | None:
    pull = state.pull
    if state.outcome == RebaseOutcome.CONFLICTS:
        return "nothing pushed: conflicts"
    if not state.new_sha or state.new_sha == state.head_sha:
        state.outcome = RebaseOutcome.UP_TO_DATE
        return "already up to date"
    # Every pushed commit passes the guard, and a rebase may only replay the PR's own
    # commits (whatever ran in the sandbox, only the PR's commits may come out of it).
    state.violations = state.work.guard(state.base_sha, state.new_sha, replay_of=state.head_sha)
    if state.violations:
        state.outcome, state.patch = RebaseOutcome.REFUSED, ""
        return "\n".join(state.violations)
    if not pull.can_push_to_head:
        state.outcome = RebaseOutcome.PATCH
        return "fork without maintainer_can_modify: patch commented"
    new_sha = state.new_sha
    try:
        as_person(
            state.work,
            lambda: state.work.push(
                new_sha,
                pull.head_ref,
                lease=pull.head_sha,
                clone_url=pull.head_clone_url,
                head_repo=pull.head_repo,
            ),
        )
    except GitError as exc:
        # Edits by maintainers reach a fork only for those who may write to this repository
        # (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/working-with-forks/allowing-changes-to-a-pull-request-branch-created-from-a-fork).
        if not (pull.fork and "returned error: 403" in exc.output):
            raise
        state.outcome = RebaseOutcome.PATCH
        return "the fork refused the push (403): patch commented"
    state.outcome = RebaseOutcome.PUSHED
    return f"pushed {state.new_sha[:12]} with --force-with-lease={state.head_sha[:12]}"


def _report(state: Rebase) -> str | None:
    # Branch and file names come from the PR: code spans and a fence they cannot close.
    head, base = inline_code(state.pull.head_ref), inline_code(state.pr.base.ref)
    if state.outcome == RebaseOutcome.PUSHED:
        body = f"Rebased {head} onto {base} ({state.head_sha[:7]} → {(state.new_sha or '')[:7]})."
    elif state.outcome == RebaseOutcome.UP_TO_DATE:
        body = f"{head} is already based on the tip of {base}; nothing to do."
    elif state.outcome == RebaseOutcome.PATCH:
        body = (
            f"{head} lives in a fork that onloop may not push to (it needs *Allow edits by "
            "maintainers* ticked, and you need write access here), so it did not push. Apply "
            "this patch there (`git am`).\n\n" + details("patch", state.patch, limit=60000)
        )
    elif state.outcome == RebaseOutcome.REFUSED:
        rules = "\n".join(f"- {v}" for v in state.violations)
        body = f"onloop rebased {head} but refused to push it; {head} is untouched:\n\n{rules}"
    else:
        files = "\n".join(f"- {inline_code(f)}" for f in state.conflicts) or "- (git listed none)"
        steps = (
            f"git fetch origin\ngit checkout {shlex.quote(state.pull.head_ref)}\n"
            f"git rebase {shlex.quote('origin/' + state.pr.base.ref)}\n"
            "# fix the files, git add them, then: git rebase --continue\n"
            "git push --force-with-lease"
        )
        body = (
            f"{head} does not rebase cleanly onto {base}; the branch "
            f"is untouched. Conflicting files:\n\n{files}\n\nTo resolve them locally:\n\n"
            + fenced(steps, "sh")
        )
    work = state.work
    work.ctx.before_write()
    as_person(
        work,
        lambda: upsert_comment(
            work.user_repo.get_issue(state.pull.number),
            f"job-{work.ctx.job.id}",
            body,
            work.login,
        ),
    )
    return state.outcome


STEPS: list[Step[Rebase]] = [
    Step("rebase", _rebase_in_sandbox),
    Step("push", _push),
    Step("report", _report),
]


def _refuse_unpushable_head(state: Rebase) -> None:
    """A rebase force-pushes the head branch itself, so no other branch can take it: a default
    or protected head is refused before any work (a fork without maintainer edits gets its
    patch instead)."""
    pull = state.pull
    if not pull.can_push_to_head:
        return
    head = state.work.push_target(pull.head_ref, pull.head_repo)
    if not head.allowed:
        raise JobFailed(
            f"{head.message()}. A rebase rewrites the head branch itself, so only someone who "
            "may update it can do it (or open the change from another branch).",
            outcome=head.refusal,
        )


def run_rebase(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = ["policy", "authorization", *(s.name for s in STEPS)]
    work = begin(ctx, "rebase")
    assert ctx.job.number is not None
    pr = work.repo.get_pull(ctx.job.number)
    base_sha = work.repo.get_branch(pr.base.ref).commit.sha
    state = Rebase(work, pr, PullRef.of(pr, work.repo), base_sha=base_sha)
    _refuse_unpushable_head(state)
    if (merged := rebase_on_verified(work, pr, state.pull, base_sha)) is not None:
        return merged  # a head that takes only verified commits: refused, or a merge
    with ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == ctx.job.id).values(head_sha=state.head_sha))
    run_steps(ctx, STEPS, state)
    result = {"outcome": state.outcome, "old": state.head_sha, "new": state.new_sha}
    if state.outcome == RebaseOutcome.CONFLICTS:
        raise JobFailed("conflicts", conflicts=state.conflicts, **result)
    if state.outcome == RebaseOutcome.REFUSED:
        raise JobFailed("refused to push", violations=state.violations, **result)
    return result
