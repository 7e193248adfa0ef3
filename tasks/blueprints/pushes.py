"""Where a job's work may go: the branch lease, the push target and the person's own push."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from github import GithubException
from sqlalchemy import update

from app.store import audit
from app.store.models import Job
from tasks.blueprints.targets import (
    Refusal,
    Signatures,
    Target,
    classic_signatures,
    rejected_as_protected,
    rejected_as_unsigned,
)
from tasks.blueprints.targets import push_target as target_of
from tasks.blueprints.verified import needs_verified, push_verified, stale
from tasks.git.process import GitError, git
from tasks.runner.context import JobFailed
from tasks.runner.people import as_person

if TYPE_CHECKING:
    from tasks.blueprints.common import Work

TRAILER = "Onloop-Job"
VIA = "createCommitOnBranch"  # the audit's name for commits GitHub made (verified.py)


def branch_lease(work: Work, branch: str, again: str, mark: str | None = None) -> str:
    """What `branch` must still hold when onloop pushes its own branch: "" (it must not
    exist), or its tip when an earlier run of this same job pushed it (a worker died
    after pushing). Anything else on it is somebody's work: JobFailed, never overwritten.
    `mark`: the trailer line that makes the tip onloop's (default: this job's)."""
    try:
        tip = work.repo.get_branch(branch).commit.sha
    except GithubException as exc:
        if exc.status == 404:
            return ""
        raise
    cache, name = work.place.cache, work.repo.full_name
    mirror = cache.ensure(name, work.repo.clone_url, work.install_token, sha=tip)
    message = git(["log", "-1", "--format=%B", tip], mirror, check=False).stdout
    mark = mark or f"{TRAILER}: {work.ctx.job.id}"
    if not re.search(rf"^{re.escape(mark)}$", message, re.MULTILINE):
        raise JobFailed(
            f"branch `{branch}` already exists and holds work this job did not make; "
            f"delete or rename it, then {again}"
        )
    return tip


def push_target(work: Work, branch: str, head_repo: str | None = None) -> Target:
    """Whether onloop may push to `branch` of `head_repo` (this repository when None; a
    fork is read with the person's token, as the installation's may not reach it)."""
    client = work.ctx.github.user_client
    if head_repo is None or head_repo.lower() == work.repo.full_name.lower():
        target = target_of(work.repo, branch)
        name = work.repo.full_name
    else:
        target = as_person(work, lambda: target_of(client(work.token).get_repo(head_repo), branch))
        name = head_repo
    if target.signatures != Signatures.UNKNOWN:
        return target
    # The job's installation token never has `administration: read`; the person's token has
    # it when the App was granted it and the person administers the repository.
    found = as_person(work, lambda: classic_signatures(client(work.token).get_repo(name), branch))
    return replace(target, signatures=found)


def push(
    work: Work,
    sha: str,
    branch: str,
    *,
    lease: str | None,
    clone_url: str | None = None,
    head_repo: str | None = None,
    keep: tuple[str, str] | None = None,
) -> str:
    """Push `sha` to `branch` (of `head_repo`, at `clone_url`; this repository by default)
    with the person's token, unless it is a default or protected branch (JobFailed).
    `lease` is the sha the branch must still have ("" when it must not exist yet). Where
    the branch needs verified commits (verified.py) GitHub makes them instead of a push.
    The branch's new head on GitHub: `sha`, or the last commit GitHub made. The job's head
    becomes `sha` first, so the `synchronize` our own push causes does not cancel this job
    as stale. `keep`: (sha, ref) of a new ref (not a branch: a rebase's backup) created in
    the same atomic git push; the caller records it. Where it may push is as read for this
    job (Work.targets: early, or again with `renew`)."""
    target = work.push_target(branch, head_repo)
    if not target.allowed:
        raise JobFailed(target.message(), outcome=target.refusal, branch=branch)
    via = None
    if needs_verified(work, target):
        new, via = _push_verified(work, target, sha, lease=lease or ""), VIA
    else:
        _push_with_git(work, target, sha, lease=lease, clone_url=clone_url, keep=keep)
        new = sha
    audit.record_push(
        work.ctx.db,
        repo=work.repo.full_name,
        job_id=work.ctx.job.id,
        ref=f"refs/heads/{branch}",
        old=lease,
        new=new,
        identity=work.login,
        via=via,
    )
    return new


def _set_head(work: Work, sha: str | None) -> None:
    with work.ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == work.ctx.job.id).values(head_sha=sha))


def _push_verified(work: Work, target: Target, sha: str, *, lease: str) -> str:
    """The commits made by GitHub. Their shas are known only once made, so the job's head
    is cleared meanwhile: a job without one is never cancelled as stale by the `synchronize`
    each commit causes (app/intake/record.py), and the expected head OID guards the branch."""
    _set_head(work, None)
    new = sha
    try:
        new = push_verified(work, target, sha, lease=lease)
        return new
    finally:
        _set_head(work, new)


def _push_with_git(
    work: Work,
    target: Target,
    sha: str,
    *,
    lease: str | None,
    clone_url: str | None,
    keep: tuple[str, str] | None = None,
) -> None:
    branch = target.branch
    _set_head(work, sha)

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
        if (said := rejected_as_unsigned(branch, exc.output)) is not None:
            raise JobFailed(said, outcome=Refusal.UNSIGNED, branch=branch) from None
        if (said := rejected_as_protected(branch, exc.output)) is not None:
            raise JobFailed(said, outcome=Refusal.PROTECTED, branch=branch) from None
        if "stale info" in str(exc) or "rejected" in str(exc):
            raise stale(branch) from None
        raise
