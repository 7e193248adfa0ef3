"""A pull request as the blueprints need it: where its head lives and whether onloop may push."""

from __future__ import annotations

from dataclasses import dataclass

from github.PullRequest import PullRequest
from github.Repository import Repository


@dataclass(frozen=True)
class PullRef:
    """A pull request's head and base, read once from GitHub. `head_repo` is None when the
    head's repository was deleted (GitHub then sends `head.repo: null`)."""

    number: int
    base_repo: str  # owner/name
    head_repo: str | None  # owner/name
    head_clone_url: str | None
    head_ref: str  # the head's branch name
    head_sha: str
    maintainer_can_modify: bool
    author: str | None = None  # who opened it (its head's trust: tasks/blueprints/heads.py)

    @classmethod
    def of(cls, pr: PullRequest, base: Repository) -> PullRef:
        head = pr.head.repo
        return cls(
            number=pr.number,
            base_repo=base.full_name,
            head_repo=head.full_name if head is not None else None,
            head_clone_url=head.clone_url if head is not None else None,
            head_ref=pr.head.ref,
            head_sha=pr.head.sha,
            maintainer_can_modify=bool(pr.maintainer_can_modify),
            author=pr.user.login if pr.user is not None else None,
        )

    @property
    def fork(self) -> bool:
        """The head lives in another repository (or in one that is gone)."""
        return self.head_repo != self.base_repo

    @property
    def pull_ref(self) -> str:
        """GitHub's read-only ref for the head of any pull request, a fork's too, fetched from
        the base repository (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/reviewing-changes-in-pull-requests/checking-out-pull-requests-locally)."""
        return f"refs/pull/{self.number}/head"

    @property
    def fetch_refs(self) -> list[str]:
        """What a mirror of the base repository must fetch besides its branches to have the
        head commit: a fork's commits are only under the pull ref."""
        return [self.pull_ref] if self.fork else []

    @property
    def can_push_to_head(self) -> bool:
        """The head branch takes onloop's pushes: it is here, or in a fork that still exists
        and allows edits by maintainers
        (https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/working-with-forks/allowing-changes-to-a-pull-request-branch-created-from-a-fork)."""
        return not self.fork or (self.head_repo is not None and self.maintainer_can_modify)
