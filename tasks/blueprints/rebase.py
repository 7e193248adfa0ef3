"""rebase_pr: rebase a PR's head onto its base tip in the sandbox, push with the person's token."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from github.PullRequest import PullRequest
from sqlalchemy import update

from app.core.aside import aside
from app.core.markdown import fenced, inline_code
from app.github.comments import details, thread, upsert_comment
from app.store.models import Job
from tasks.blueprints import Step, run_steps
from tasks.blueprints.change import configured_agent
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.blueprints.heads import head_trust
from tasks.blueprints.mirror_fetch import Wanted
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.rebase_receipt import (
    backup_of,
    keep_in_base,
    receipt,
    record_backup,
    same_repo,
)
from tasks.blueprints.rebase_resolve import Settled, check, resolve, strays, unresolved_report
from tasks.blueprints.rebase_verified import rebase_on_verified
from tasks.blueprints.receipts import Receipt, receipt_markdown
from tasks.blueprints.targets import Target
from tasks.git.process import GitError
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person
from tasks.sandbox.commits import run_then_bundle


class RebaseOutcome(StrEnum):
    PUSHED = "pushed"
    UP_TO_DATE = "up_to_date"
    CONFLICTS = "conflicts"  # the branch is untouched
    PATCH = "patch"  # onloop may not push to the fork: the patch is in a comment
    REFUSED = "refused"  # the guard refused the rebased commits: nothing pushed
    UNRESOLVED = "unresolved"  # the agent's resolution failed or failed the checks: untouched


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
    receipt: Receipt | None = None  # once pushed
    settled: Settled | None = None  # when the agent resolved conflicts

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
        state.head_sha,
        trust=trust,
        refs=pull.fetch_refs,
        also=[state.base_sha],  # the base may have moved while the head was in the mirror
        branch=pull.head_ref,
        setup=False,
    ) as js:
        box = js.sandbox
        git = ["git", "-c", "rerere.enabled=true", "-c", "core.editor=true"]
        rebase = [*git, "rebase", "--no-autosquash", state.base_sha]
        done, bundled = run_then_bundle(box, rebase, state.base_sha, env)
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
                if (agent := configured_agent(work.ctx)) is not None:
                    state.settled = resolve(work, box, agent, state.base_sha, git, env)
                if state.settled is None or not state.settled.rebased:
                    unsettled = state.settled is not None and bool(state.settled.hunks)
                    state.outcome = (
                        RebaseOutcome.UNRESOLVED if unsettled else RebaseOutcome.CONFLICTS
                    )
                    why = f" ({state.settled.reason})" if state.settled else ""
                    return "conflicts: " + ", ".join(state.conflicts) + why
        state.conflicts = []
        state.new_sha = work.collect(box, state.base_sha, bundled=bundled)
        if pull.fork and state.new_sha:  # in case onloop cannot push to the fork
            patch = box.exec(["git", "format-patch", "--stdout", f"{state.base_sha}..HEAD"])
            state.patch = patch.stdout
    if state.settled is not None and state.new_sha:
        state.violations = strays(work, state.settled, state.base_sha, pull.head_sha, state.new_sha)
        if state.violations:
            state.outcome, state.patch = RebaseOutcome.REFUSED, ""
            return "\n".join(state.violations)
        check(work, state.settled, state.new_sha, trust, pull.fetch_refs)
        if not state.settled.passed:
            state.outcome, state.patch = RebaseOutcome.UNRESOLVED, ""
            return "the resolved rebase failed its checks; nothing will be pushed"
    return (
        f"rebased onto {state.base_sha[:12]}: {state.head_sha[:12]} -> {(state.new_sha or '')[:12]}"
    )


def _push(state: Rebase) -> str | None:
    pull = state.pull
    if state.outcome in (RebaseOutcome.CONFLICTS, RebaseOutcome.UNRESOLVED):
        return f"nothing pushed: {state.outcome}"
    if state.outcome == RebaseOutcome.REFUSED:
        return "nothing pushed: " + "; ".join(state.violations)
    if not state.new_sha or state.new_sha == state.head_sha:
        state.outcome = RebaseOutcome.UP_TO_DATE
        return "already up to date"
    if pull.can_push_to_head:
        # A force-push rewrites the PR's own branch, and an agent may have spent minutes on
        # its conflicts: where it may go is read again now, beside the guard.
        state.work.targets.renew(pull.head_ref, pull.head_repo)
    # Every pushed commit passes the guard, and a rebase may only replay the PR's own
    # commits (whatever ran in the sandbox, only the PR's commits may come out of it).
    # Commits the agent resolved are not replays, so they get the guard of any change instead.
    replay_of = state.head_sha if state.settled is None else None
    state.violations = state.work.guard(state.base_sha, state.new_sha, replay_of=replay_of)
    if state.violations:
        state.outcome, state.patch = RebaseOutcome.REFUSED, ""
        return "\n".join(state.violations)
    if not pull.can_push_to_head:
        state.outcome = RebaseOutcome.PATCH
        return "fork without maintainer_can_modify: patch commented"
    new_sha, work = state.new_sha, state.work
    # The old head stays reachable under a backup ref: created in the same atomic push
    # when the branch is here, pushed to this repository after it when the head is a fork's.
    backup, together = backup_of(work, pull), same_repo(work, pull)
    try:
        as_person(
            work,
            lambda: work.push(
                new_sha,
                pull.head_ref,
                lease=pull.head_sha,
                clone_url=pull.head_clone_url,
                head_repo=pull.head_repo,
                keep=(pull.head_sha, backup) if together else None,
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
    if together:
        record_backup(work, pull.head_sha, backup)
    note = "" if together else keep_in_base(work, pull.head_sha, backup)
    state.receipt = receipt(
        work,
        pull,
        base=state.base_sha,
        old=pull.head_sha,
        new=new_sha,
        backup=None if note else backup,
        backup_note=note,
        hunks=state.settled.hunks if state.settled else (),
        checks=state.settled.checks if state.settled else None,
    )
    kept = f"; old head kept as {backup}" if not note else f"; no backup: {note}"
    return f"pushed {new_sha[:12]} with --force-with-lease={state.head_sha[:12]}{kept}"


def _report(state: Rebase) -> str | None:
    # Branch and file names come from the PR: code spans and a fence they cannot close.
    head, base = inline_code(state.pull.head_ref), inline_code(state.pr.base.ref)
    if state.outcome == RebaseOutcome.PUSHED:
        body = f"Rebased {head} onto {base} ({state.head_sha[:7]} → {(state.new_sha or '')[:7]})."
        if state.receipt is not None:
            body += "\n\n" + receipt_markdown(state.receipt)
    elif state.outcome == RebaseOutcome.UP_TO_DATE:
        body = f"{head} is already based on the tip of {base}; nothing to do."
    elif state.outcome == RebaseOutcome.PATCH:
        body = (
            f"{head} lives in a fork that onloop may not push to (it needs *Allow edits by "
            "maintainers* ticked, and you need write access here), so it did not push. Apply "
            "this patch there (`git am`).\n\n" + details("patch", state.patch, limit=60000)
        )
    elif state.outcome == RebaseOutcome.UNRESOLVED and state.settled is not None:
        body = unresolved_report(head, base, state.settled)
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
            thread(work.user_repo, state.pull.number),
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


def _refuse_unpushable_head(state: Rebase) -> Target | None:
    """A rebase force-pushes the head branch itself, so no other branch can take it: a default
    or protected head is refused before any work (a fork without maintainer edits gets its
    patch instead). The head's push target, read once for what follows."""
    pull = state.pull
    if not pull.can_push_to_head:
        return None
    head = state.work.push_target(pull.head_ref, pull.head_repo)
    if not head.allowed:
        raise JobFailed(
            f"{head.message()}. A rebase rewrites the head branch itself, so only someone who "
            "may update it can do it (or open the change from another branch).",
            outcome=head.refusal,
        )
    return head


def run_rebase(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = ["policy", "authorization", *(s.name for s in STEPS)]
    assert ctx.job.number is not None
    found = installation_repo(ctx)
    number, repo = ctx.job.number, found[1]

    def read() -> tuple[PullRequest, PullRef, str]:
        """The pull request, its head, and its base's tip."""
        pr = repo.get_pull(number)
        return pr, PullRef.of(pr, repo), repo.get_branch(pr.base.ref).commit.sha

    asked = aside("pull-read", read)  # beside the policy step

    def to_fetch() -> Wanted | None:
        """The head and the base to fetch once the policy and the authorisation passed (a
        failed read is raised below, where it always was)."""
        if asked.exception() is not None:
            return None
        _, head, base = asked.result()
        return Wanted(head.head_sha, head.fetch_refs, also=(base,))

    work = begin(ctx, "rebase", found, prefetch=to_fetch)
    pr, pull, base_sha = asked.result()
    if pull.can_push_to_head:  # where the head may be force-pushed, read on a thread
        work.targets.prefetch(pull.head_ref, pull.head_repo)
    state = Rebase(work, pr, pull, base_sha=base_sha)
    head = _refuse_unpushable_head(state)
    if (merged := rebase_on_verified(work, pr, state.pull, base_sha, head)) is not None:
        return merged  # a head that takes only verified commits: refused, or a merge
    with ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == ctx.job.id).values(head_sha=state.head_sha))
    run_steps(ctx, STEPS, state)
    result: dict[str, Any] = {"outcome": state.outcome, "old": state.head_sha, "new": state.new_sha}
    if state.settled is not None:
        result["hunks"] = [[h.path, h.line, h.resolution.name] for h in state.settled.hunks]
        result["checks"] = {c.command: c.exit_code for c in state.settled.checks}
    if state.outcome == RebaseOutcome.CONFLICTS:
        raise JobFailed("conflicts", conflicts=state.conflicts, **result)
    if state.outcome == RebaseOutcome.UNRESOLVED:
        raise JobFailed("conflicts not resolved", conflicts=state.conflicts, **result)
    if state.outcome == RebaseOutcome.REFUSED:
        raise JobFailed("refused to push", violations=state.violations, **result)
    return result
