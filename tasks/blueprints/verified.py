"""Verified commits: where a branch needs them, onloop's commits are made by GitHub through
GraphQL `createCommitOnBranch` with the person's token (signed, authored by the person), one
mutation per commit under the expected head OID; a git push is never tried there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from github import GithubException

from app.core.markdown import inline_code
from app.github.signed_commits import CommitRefused, StaleHead, create_commit_on_branch
from app.policy.repo_config import CommitMode
from tasks.blueprints.targets import Signatures, Target
from tasks.git.file_changes import FileChanges, NotExpressible, file_changes
from tasks.git.process import git
from tasks.runner.context import JobFailed
from tasks.runner.people import as_person

if TYPE_CHECKING:
    from tasks.blueprints.common import Work


def needs_verified(work: Work, target: Target) -> bool:
    """Whether onloop's commits to `target` must be made by GitHub: a rule requires signed
    commits there, or `.github/onloop.yml` says `commits: verified`."""
    return target.signatures.required or work.config.commits == CommitMode.VERIFIED


def why_verified(target: Target) -> str:
    """Why `target` takes verified commits, as words after "because"."""
    if target.signatures == Signatures.RULESET:
        return "a ruleset requires signed commits on it"
    if target.signatures == Signatures.PROTECTION:
        return "its branch protection requires signed commits"
    return "`.github/onloop.yml` says `commits: verified`"


def stale(branch: str) -> JobFailed:
    """The same failure as a git push whose lease no longer holds."""
    return JobFailed(
        f"`{branch}` changed on GitHub while onloop worked, so nothing was pushed; "
        "ask again to work on its new head"
    )


def commits_to_make(mirror: Path, sha: str, lease: str) -> tuple[str, list[str]]:
    """The commit the branch must start from and the commits to make on it, oldest first.
    With a lease, the commits since it (they must build on it: history cannot be rewritten
    through createCommitOnBranch; none when the lease already holds the same files, as the
    commit GitHub made in an earlier run of the job does); for a new branch, those on no
    branch of the mirror."""
    if lease:
        if git(["merge-base", "--is-ancestor", lease, sha], mirror, check=False).returncode:
            trees = git(["rev-parse", f"{lease}^{{tree}}", f"{sha}^{{tree}}"], mirror).stdout
            if len(set(trees.split())) == 1:  # an earlier run of the job made this already
                return lease, []
            raise JobFailed(
                f"the new head {sha[:12]} does not build on {lease[:12]}; verified commits can "
                "only be added on top of a branch, never rewrite it, so nothing was pushed"
            )
        listed = git(["rev-list", "--reverse", "--topo-order", f"{lease}..{sha}"], mirror)
        return lease, listed.stdout.split()
    listed = git(["rev-list", "--reverse", "--topo-order", sha, "--not", "--branches"], mirror)
    commits = listed.stdout.split()
    if not commits:
        return sha, []
    parents = git(["rev-list", "--parents", "-n", "1", commits[0]], mirror).stdout.split()
    if len(parents) != 2:
        raise JobFailed(f"{commits[0][:12]} has no one parent on GitHub to start a branch from")
    return parents[1], commits


def push_verified(work: Work, target: Target, sha: str, *, lease: str) -> str:
    """Make the commits `lease..sha` on `target` through createCommitOnBranch as the person
    (a new branch, `lease` "", is first created at their base through the REST API, since
    the mutation only appends to a branch that exists); the branch's new head on GitHub."""
    cache, branch = work.place.cache, target.branch
    with cache.lock(work.repo.full_name, shared=True):
        mirror = cache.mirror_path(work.repo.full_name)
        base, commits = commits_to_make(mirror, sha, lease)
        try:  # all of them read before any write: a refusal changes nothing on GitHub
            made: list[FileChanges] = [file_changes(mirror, c) for c in commits]
        except NotExpressible as exc:
            raise JobFailed(
                f"{inline_code(branch)} takes only verified commits, which GitHub makes from "
                f"file contents alone, and {exc}; nothing was pushed"
            ) from None
    client = work.ctx.github.user_client
    if not lease:
        work.ctx.before_write()
        ref = f"refs/heads/{branch}"
        try:
            as_person(work, lambda: work.user_repo.create_git_ref(ref, base))
        except GithubException as exc:
            if exc.status == 422:  # "Reference already exists": someone made it meanwhile
                raise stale(branch) from None
            raise
    head = base
    for changes in made:
        work.ctx.before_write()  # cancelled means final, between two commits too
        given = changes.mutation_input(target.repo, branch, head)

        def make(given: dict[str, Any] = given) -> str:
            return create_commit_on_branch(client(work.token), given)

        try:
            head = as_person(work, make)
        except StaleHead:
            raise stale(branch) from None
        except CommitRefused as exc:
            raise JobFailed(
                f"GitHub refused to make the commit on {inline_code(branch)}: {exc}; "
                "nothing more was pushed"
            ) from None
    return head
