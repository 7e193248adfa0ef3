"""A pushed rebase's receipt from the mirror, and the backup ref that holds the old head."""

from __future__ import annotations

from collections.abc import Sequence

from app.store import audit
from tasks.blueprints.common import Work
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.receipts import CheckRun, Hunk, Receipt, backup_ref
from tasks.git.process import GitError
from tasks.git.range_diff import describe_failure, range_diff
from tasks.runner.people import as_person


def backup_of(work: Work, pull: PullRef) -> str:
    """The ref this job keeps the PR's old head under, in the base repository."""
    return backup_ref(pull.head_ref, work.ctx.job.id)


def same_repo(work: Work, pull: PullRef) -> bool:
    """The head branch is in the base repository: its backup goes in the same atomic push."""
    head = pull.head_repo
    return head is None or head.lower() == work.repo.full_name.lower()


def keep_in_base(work: Work, old: str, ref: str) -> str:
    """Push `old` to `ref` of the base repository with the person's token (a fork's head:
    the fork takes no refs but the PR branch from a maintainer). "" when kept, else why not;
    the rebase already landed, so a refusal here only loses the backup."""
    name = work.repo.full_name

    def send() -> None:
        work.ctx.before_write()
        work.place.cache.push(name, work.repo.clone_url, old, ref, work.token, lease="")

    try:
        as_person(work, send)
    except GitError as exc:
        return describe_failure(exc)
    record_backup(work, old, ref)
    return ""


def record_backup(work: Work, old: str, ref: str) -> None:
    """The backup ref in the audit log, as a push of its own (created: no old sha)."""
    audit.record_push(
        work.ctx.db,
        repo=work.repo.full_name,
        job_id=work.ctx.job.id,
        ref=ref,
        old="",
        new=old,
        identity=work.login,
    )


def receipt(
    work: Work,
    pull: PullRef,
    *,
    base: str,
    old: str,
    new: str,
    backup: str | None,
    backup_note: str = "",
    hunks: Sequence[Hunk] = (),
    checks: Sequence[CheckRun] | None = None,
) -> Receipt:
    """The receipt of a rebase of `old` onto `base` that pushed `new`; the range-diff is read
    in the mirror, which holds all three."""
    cache, name, here = work.place.cache, work.repo.full_name, same_repo(work, pull)
    text, error = "", ""
    try:
        with cache.lock(name, shared=True):
            text = range_diff(cache.mirror_path(name), base, old, new)
    except GitError as exc:
        error = describe_failure(exc)
    return Receipt(
        branch=pull.head_ref,
        old=old,
        new=new,
        base=base,
        backup=backup,
        backup_days=work.config.backup_days,
        backup_note=backup_note,
        fetch_from="origin" if here else work.repo.clone_url,
        push_to="origin" if here else pull.head_clone_url or "origin",
        range_diff=text,
        range_diff_error=error,
        hunks=hunks,
        checks=checks,
    )
