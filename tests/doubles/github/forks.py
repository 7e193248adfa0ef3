"""Pull requests across forks in git: `refs/pull/N/head`, and maintainers' pushes to forks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.doubles.github import gitrepo
from tests.doubles.github.auth import user_role
from tests.doubles.github.model import Identity, Repo, role_at_least

if TYPE_CHECKING:
    from tests.doubles.github.state import State


def sync_pull_refs(state: State, repo: Repo) -> None:
    """Point `refs/pull/<n>/head` of `repo` at each pull request's head, fetching the commits
    from the fork, as GitHub keeps them for every pull request (forks included)
    (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/reviewing-changes-in-pull-requests/checking-out-pull-requests-locally)."""
    pulls = [issue for issue in repo.issues.values() if issue.pull is not None]
    # The refs as they are, in one git process: one per pull request (under the double's
    # lock, on every fetch) made a fetch slower with each pull request the double held.
    current = gitrepo.refs(repo.git_dir) if pulls else {}
    for issue in pulls:
        pull = issue.pull
        assert pull is not None
        head_repo = state.find_repo(pull.head_repo) or repo
        sha = gitrepo.rev(head_repo.git_dir, f"refs/heads/{pull.head_ref}")
        ref = f"refs/pull/{issue.number}/head"
        if sha is None or current.get(ref) == sha:
            continue  # a deleted head branch leaves the ref where it was
        if head_repo is repo:
            gitrepo.git(repo.git_dir, "update-ref", ref, sha)
        else:
            source = f"+refs/heads/{pull.head_ref}:{ref}"
            gitrepo.git(
                repo.git_dir, "fetch", "--quiet", "--no-tags", str(head_repo.git_dir), source
            )


def maintainer_branches(state: State, fork: Repo, ident: Identity) -> list[str]:
    """The branches of `fork` that `ident` may push to as a maintainer of its parent: heads of
    open pull requests into the parent that allow edits by maintainers, for a user token of
    someone with write access to the parent, where the app is installed
    (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/working-with-forks/allowing-changes-to-a-pull-request-branch-created-from-a-fork)."""
    if ident.kind != "user" or not ident.login or fork.fork_of is None:
        return []
    parent = state.find_repo(fork.fork_of)
    if parent is None or state.installation_for(parent) is None:
        return []
    if not role_at_least(user_role(state, parent, ident.login), "write"):
        return []
    return sorted(
        {
            issue.pull.head_ref
            for issue in parent.issues.values()
            if issue.pull is not None
            and issue.state == "open"
            and issue.pull.maintainer_can_modify
            and issue.pull.head_repo.lower() == fork.full_name.lower()
        }
    )


def push_only_to(branches: list[str]) -> dict[str, str]:
    """git config (as environment) that lets receive-pack see and update only `branches`:
    every other ref is hidden, and git refuses updates to hidden refs."""
    values = ["refs/", *(f"!refs/heads/{b}" for b in branches)]
    env = {"GIT_CONFIG_COUNT": str(len(values))}
    for i, value in enumerate(values):
        env[f"GIT_CONFIG_KEY_{i}"] = "receive.hideRefs"
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env
