"""`/agent rebase` where the head takes only verified commits: a rebase rewrites history,
which GitHub cannot sign, so it is refused before any sandbox work, or, with `rebase: merge`
in `.github/onloop.yml`, GitHub merges the base into the head as the person (signed)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from github import GithubException
from github.PullRequest import PullRequest
from sqlalchemy import update

from app.core.markdown import inline_code
from app.github.comments import thread, upsert_comment
from app.policy.repo_config import RebaseMode
from app.store import audit
from app.store.models import Job
from tasks.blueprints.common import Work
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.targets import Target
from tasks.blueprints.verified import needs_verified, stale, why_verified
from tasks.runner.context import JobFailed
from tasks.runner.people import as_person


class MergeOutcome(StrEnum):
    """How a rebase on a verified-commits head ended (the job result's `outcome`)."""

    UNVERIFIABLE = "unverifiable"  # refused: a rebase cannot be made of verified commits
    MERGED = "merged"  # GitHub merged the base into the head
    UP_TO_DATE = "up_to_date"
    CONFLICTS = "conflicts"  # the merge conflicts; the branch is untouched


def rebase_on_verified(
    work: Work, pr: PullRequest, pull: PullRef, base_sha: str, target: Target | None = None
) -> dict[str, Any] | None:
    """None when the head takes git pushes (rebase as usual); else the refusal (JobFailed)
    or the result of merging the base into the head instead. `target`: the head's push
    target when the caller read it already."""
    if not pull.can_push_to_head:
        return None  # a fork onloop may not push to: the rebase's patch path, as usual
    target = target or work.push_target(pull.head_ref, pull.head_repo)
    if not target.allowed or not needs_verified(work, target):
        return None
    head, base = inline_code(pull.head_ref), inline_code(pr.base.ref)
    why = why_verified(target)
    if work.config.rebase != RebaseMode.MERGE or pull.fork:
        also = (
            " A merge through GitHub's API can only be made in this repository, and this "
            "head lives in a fork."
            if work.config.rebase == RebaseMode.MERGE
            else " Add `rebase: merge` to `.github/onloop.yml` on the default branch and "
            f"onloop merges {base} into {head} instead (GitHub signs that merge commit)."
        )
        raise JobFailed(
            f"{head} takes only verified commits ({why}), and a rebase rewrites its history "
            "into new commits that GitHub cannot sign, so onloop did not rebase it; the branch "
            f"is untouched.{also} Or rebase it locally and push commits signed with your "
            "own key.",
            outcome=MergeOutcome.UNVERIFIABLE,
        )
    return _merge_base(work, pr, pull, base_sha, why)


def _merge_base(
    work: Work, pr: PullRequest, pull: PullRef, base_sha: str, why: str
) -> dict[str, Any]:
    """Merge the base tip into the head through POST /repos/{o}/{r}/merges with the person's
    token: GitHub makes the merge commit, authored by them and signed by GitHub
    (https://docs.github.com/en/rest/branches/branches#merge-a-branch,
    https://docs.github.com/en/authentication/managing-commit-signature-verification/about-commit-signature-verification).
    The endpoint takes no expected head, so the head is checked just before: a merge only
    adds a commit on top, and never loses one pushed meanwhile."""
    ctx, branch = work.ctx, pull.head_ref
    ctx.plan = ["policy", "authorization", "merge", "report"]
    result: dict[str, Any] = {"old": pull.head_sha, "new": None}
    with ctx.step("merge") as step:
        if work.repo.get_branch(branch).commit.sha != pull.head_sha:
            raise stale(branch)
        ctx.before_write()
        message = f"Merge {pr.base.ref} into {branch}\n\nOnloop-Job: {ctx.job.id}"
        _set_head(work, None)  # as for verified commits: the merge's sha is known only after
        try:
            made = as_person(work, lambda: work.user_repo.merge(branch, base_sha, message))
        except GithubException as exc:
            if exc.status != 409:
                raise
            made, result["outcome"] = None, MergeOutcome.CONFLICTS
        finally:
            _set_head(work, pull.head_sha)
        if made is not None:
            result.update(outcome=MergeOutcome.MERGED, new=made.sha)
            _set_head(work, made.sha)
            audit.record_push(
                ctx.db,
                repo=work.repo.full_name,
                job_id=ctx.job.id,
                ref=f"refs/heads/{branch}",
                old=pull.head_sha,
                new=made.sha,
                identity=work.login,
                via="merges",
            )
        result.setdefault("outcome", MergeOutcome.UP_TO_DATE)
        step.output = f"{result['outcome']}: {pull.head_sha[:12]} -> {(result['new'] or '')[:12]}"
    with ctx.step("report"):
        _report(work, pr, pull, result, why)
    if result["outcome"] == MergeOutcome.CONFLICTS:
        raise JobFailed("conflicts", **result)
    return result


def _report(work: Work, pr: PullRequest, pull: PullRef, result: dict[str, Any], why: str) -> None:
    head, base = inline_code(pull.head_ref), inline_code(pr.base.ref)
    if result["outcome"] == MergeOutcome.MERGED:
        body = (
            f"Merged {base} into {head} ({pull.head_sha[:7]} → {result['new'][:7]}) instead of "
            f"rebasing: {head} takes only verified commits ({why}), and GitHub signed this "
            "merge commit."
        )
    elif result["outcome"] == MergeOutcome.UP_TO_DATE:
        body = f"{head} already contains the tip of {base}; nothing to do."
    else:
        body = (
            f"Merging {base} into {head} conflicts, so nothing was changed; {head} is "
            f"untouched. Merge {base} locally, resolve the conflicts and push signed commits."
        )
    work.ctx.before_write()
    as_person(
        work,
        lambda: upsert_comment(
            thread(work.user_repo, pull.number), f"job-{work.ctx.job.id}", body, work.login
        ),
    )


def _set_head(work: Work, sha: str | None) -> None:
    with work.ctx.db.transaction() as s:
        s.execute(update(Job).where(Job.id == work.ctx.job.id).values(head_sha=sha))
