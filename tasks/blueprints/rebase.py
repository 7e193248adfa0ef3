"""rebase_pr: rebase a PR's head onto its base tip in the sandbox, push with the person's token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from github.PullRequest import PullRequest
from sqlalchemy import update

from app.github.comments import details, upsert_comment
from app.store.models import Job
from tasks.blueprints import Step, run_steps
from tasks.blueprints.common import Session, begin
from tasks.git.process import GitError
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person


@dataclass
class Rebase:
    job: Session
    pr: PullRequest
    base_sha: str = ""
    head_sha: str = ""
    new_sha: str | None = None
    conflicts: list[str] = field(default_factory=list)
    patch: str = ""
    outcome: str = ""

    @property
    def fork(self) -> bool:
        head = self.pr.head.repo
        return head is None or head.full_name != self.job.repo.full_name


def _rebase_in_sandbox(state: Rebase) -> str | None:
    job = state.job
    refs = [f"refs/pull/{state.pr.number}/head"] if state.fork else []
    env = job.identity()
    with job.sandbox(state.head_sha, refs=refs, branch=state.pr.head.ref) as js:
        box = js.sandbox
        git = ["git", "-c", "rerere.enabled=true", "-c", "core.editor=true"]
        done = box.exec([*git, "rebase", "--no-autosquash", state.base_sha], env=env)
        if not done.ok:
            listed = box.exec(["git", "diff", "--name-only", "--diff-filter=U"])
            state.conflicts = sorted(set(listed.stdout.split()))
            box.exec(["git", "rebase", "--abort"])
            # Conflicts that are only about white space are safe to settle by ignoring it.
            done = box.exec(
                [*git, "rebase", "--no-autosquash", "-X", "ignore-space-change", state.base_sha],
                env=env,
            )
            if not done.ok:
                box.exec(["git", "rebase", "--abort"])
                state.outcome = "conflicts"
                return "conflicts: " + ", ".join(state.conflicts)
        state.conflicts = []
        state.new_sha = job.collect(box, state.base_sha)
        if state.fork and state.new_sha:  # in case onloop cannot push to the fork
            patch = box.exec(["git", "format-patch", "--stdout", f"{state.base_sha}..HEAD"])
            state.patch = patch.stdout
    return (
        f"rebased onto {state.base_sha[:12]}: {state.head_sha[:12]} -> {(state.new_sha or '')[:12]}"
    )


def _push(state: Rebase) -> str | None:
    if state.outcome == "conflicts":
        return "nothing pushed: conflicts"
    if not state.new_sha or state.new_sha == state.head_sha:
        state.outcome = "up_to_date"
        return "already up to date"
    head_repo = state.pr.head.repo
    if state.fork and (head_repo is None or not state.pr.maintainer_can_modify):
        state.outcome = "patch"
        return "fork without maintainer_can_modify: patch commented"
    assert head_repo is not None
    new_sha = state.new_sha
    try:
        as_person(
            state.job,
            lambda: state.job.push(
                new_sha, state.pr.head.ref, lease=state.head_sha, clone_url=head_repo.clone_url
            ),
        )
    except GitError as exc:
        # Edits by maintainers reach a fork only for those who may write to this repository
        # (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/working-with-forks/allowing-changes-to-a-pull-request-branch-created-from-a-fork).
        if not (state.fork and "returned error: 403" in exc.output):
            raise
        state.outcome = "patch"
        return "the fork refused the push (403): patch commented"
    state.outcome = "pushed"
    return f"pushed {state.new_sha[:12]} with --force-with-lease={state.head_sha[:12]}"


def _report(state: Rebase) -> str | None:
    head, base = state.pr.head.ref, state.pr.base.ref
    if state.outcome == "pushed":
        body = (
            f"Rebased `{head}` onto `{base}` ({state.head_sha[:7]} → {(state.new_sha or '')[:7]})."
        )
    elif state.outcome == "up_to_date":
        body = f"`{head}` is already based on the tip of `{base}`; nothing to do."
    elif state.outcome == "patch":
        body = (
            f"`{head}` lives in a fork that onloop may not push to (it needs *Allow edits by "
            "maintainers* ticked, and you need write access here), so it did not push. Apply "
            "this patch there (`git am`).\n\n" + details("patch", state.patch, limit=60000)
        )
    else:
        files = "\n".join(f"- `{f}`" for f in state.conflicts) or "- (git listed none)"
        body = (
            f"`{head}` does not rebase cleanly onto `{base}`; the branch is untouched. "
            f"Conflicting files:\n\n{files}\n\nTo resolve them locally:\n\n```sh\n"
            f"git fetch origin\ngit checkout {head}\ngit rebase origin/{base}\n"
            "# fix the files, git add them, then: git rebase --continue\n"
            "git push --force-with-lease\n```"
        )
    as_person(
        state.job,
        lambda: upsert_comment(
            state.job.user_repo.get_issue(state.pr.number),
            f"job-{state.job.ctx.job.id}",
            body,
            state.job.login,
        ),
    )
    return state.outcome


STEPS: list[Step[Rebase]] = [
    Step("rebase", _rebase_in_sandbox),
    Step("push", _push),
    Step("report", _report),
]


def run_rebase(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = ["policy", "authorization", *(s.name for s in STEPS)]
    job = begin(ctx, "rebase")
    assert ctx.job.number is not None
    pr = job.repo.get_pull(ctx.job.number)
    state = Rebase(
        job, pr, base_sha=job.repo.get_branch(pr.base.ref).commit.sha, head_sha=pr.head.sha
    )
    with ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == ctx.job.id).values(head_sha=state.head_sha))
    run_steps(ctx, STEPS, state)
    result = {"outcome": state.outcome, "old": state.head_sha, "new": state.new_sha}
    if state.outcome == "conflicts":
        raise JobFailed("conflicts", conflicts=state.conflicts, **result)
    return result
