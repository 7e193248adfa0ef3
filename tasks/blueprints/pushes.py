"""Where a job's work may go: the branch lease, the push target and the person's own push."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from github import GithubException
from sqlalchemy import update

from app.store import audit
from app.store.models import Job
from tasks.blueprints.targets import Refusal, Target, rejected_as_protected
from tasks.blueprints.targets import push_target as target_of
from tasks.git.process import GitError, git
from tasks.runner.context import JobFailed
from tasks.runner.people import as_person

if TYPE_CHECKING:
    from tasks.blueprints.common import Work

TRAILER = "Onloop-Job"


def branch_lease(work: Work, branch: str, again: str) -> str:
    """What `branch` must still hold when onloop pushes its own branch: "" (it must not
    exist), or its tip when an earlier run of this same job pushed it (a worker died
    after pushing). Anything else on it is somebody's work: JobFailed, never overwritten."""
    try:
        tip = work.repo.get_branch(branch).commit.sha
    except GithubException as exc:
        if exc.status == 404:
            return ""
        raise
    cache, name = work.place.cache, work.repo.full_name
    mirror = cache.ensure(name, work.repo.clone_url, work.install_token, sha=tip)
    message = git(["log", "-1", "--format=%B", tip], mirror, check=False).stdout
    if not re.search(rf"^{TRAILER}: {work.ctx.job.id}$", message, re.MULTILINE):
        raise JobFailed(
            f"branch `{branch}` already exists and holds work this job did not make; "
            f"delete or rename it, then {again}"
        )
    return tip


def push_target(work: Work, branch: str, head_repo: str | None = None) -> Target:
    """Whether onloop may push to `branch` of `head_repo` (this repository when None; a
    fork is read with the person's token, as the installation's may not reach it)."""
    if head_repo is None or head_repo.lower() == work.repo.full_name.lower():
        return target_of(work.repo, branch)
    client = work.ctx.github.user_client
    return as_person(work, lambda: target_of(client(work.token).get_repo(head_repo), branch))


def push(
    work: Work,
    sha: str,
    branch: str,
    *,
    lease: str | None,
    clone_url: str | None = None,
    head_repo: str | None = None,
    keep: tuple[str, str] | None = None,
) -> None:
    """Push `sha` to `branch` (of `head_repo`, at `clone_url`; this repository by default)
    with the person's token, unless it is a default or protected branch (JobFailed).
    `lease` is the sha the branch must still have ("" when it must not exist yet). The
    job's head becomes `sha` first, so the `synchronize` our own push causes does not
    cancel this job as stale. `keep`: (sha, ref) of a new ref (not a branch: a rebase's
    backup) created in the same atomic push; the caller records it."""
    target = work.push_target(branch, head_repo)
    if not target.allowed:
        raise JobFailed(target.message(), outcome=target.refusal, branch=branch)
    with work.ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == work.ctx.job.id).values(head_sha=sha))

    def send() -> None:
        work.ctx.before_write()  # cancelled means final, even with the push prepared
        work.place.cache.push(
            work.repo.full_name,
            clone_url or work.repo.clone_url,
            sha,
            f"refs/heads/{branch}",
            work.token,
            lease=lease,
            create=[keep] if keep else (),
        )

    try:
        as_person(work, send)
    except GitError as exc:
        if (said := rejected_as_protected(branch, exc.output)) is not None:
            raise JobFailed(said, outcome=Refusal.PROTECTED, branch=branch) from None
        if "stale info" in str(exc) or "rejected" in str(exc):
            raise JobFailed(
                f"`{branch}` changed on GitHub while onloop worked, so nothing was pushed; "
                "ask again to work on its new head"
            ) from None
        raise
    audit.record_push(
        work.ctx.db,
        repo=work.repo.full_name,
        job_id=work.ctx.job.id,
        ref=f"refs/heads/{branch}",
        old=lease,
        new=sha,
        identity=work.login,
    )
