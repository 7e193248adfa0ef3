"""Issues, pull requests, comments and webhook deliveries: the activity inside repositories."""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from tests.doubles.github import gitrepo
from tests.doubles.github.api import ApiError
from tests.doubles.github.model import Comment, Delivery, Issue, PullData, Repo, User


class Activity:
    """Mixed into State: helpers that create issues, pulls, comments and deliveries."""

    if TYPE_CHECKING:
        lock: threading.RLock
        repos: dict[str, Repo]
        comments_by_id: dict[int, Comment]
        deliveries: list[Delivery]

        def repo(self, full_name: str) -> Repo: ...
        def find_repo(self, full_name: str) -> Repo | None: ...
        def user(self, login: str, type: str = "User") -> User: ...
        def next_id(self) -> int: ...
        def log_pull(self, action: Any, repo: str, n: int) -> None: ...

    # --- issues, pulls, comments -----------------------------------------------------------
    def create_issue(
        self,
        repo: str,
        title: str,
        body: str | None = "",
        user: str = "octocat",
        labels: list[str] | None = None,
    ) -> Issue:
        with self.lock:
            r = self.repo(repo)
            self.user(user)
            now = time.time()
            issue = Issue(
                r.next_number,
                self.next_id(),
                title,
                body,
                user,
                now,
                now,
                labels=list(labels or []),
            )
            r.issues[issue.number] = issue
            r.next_number += 1
            return issue

    def create_pull(
        self,
        repo: str,
        head: str,
        base: str | None = None,
        title: str = "A change",
        body: str | None = "",
        user: str = "octocat",
        *,
        maintainer_can_modify: bool = False,
        draft: bool = False,
    ) -> Issue:
        """A pull request; `head` is `branch` (same repo) or `owner:branch` (a fork)."""
        with self.lock:
            r = self.repo(repo)
            head_repo, head_ref = self.resolve_head(r, head)
            base_ref = base or r.default_branch
            head_sha = gitrepo.rev(head_repo.git_dir, f"refs/heads/{head_ref}")
            base_sha = gitrepo.rev(r.git_dir, f"refs/heads/{base_ref}")
            if head_sha is None or base_sha is None:
                raise ApiError(
                    422,
                    "Validation Failed",
                    [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                )
            issue = self.create_issue(repo, title, body, user)
            issue.pull = PullData(
                head_repo.full_name,
                head_ref,
                base_ref,
                head_sha,
                base_sha,
                maintainer_can_modify,
                draft,
            )
            self.log_pull("opened", r.full_name, issue.number)
            return issue

    def resolve_head(self, repo: Repo, head: str) -> tuple[Repo, str]:
        owner, sep, ref = head.partition(":")
        if not sep:
            return repo, head
        if owner.lower() == repo.owner.lower():
            return repo, ref
        fork = next(
            (
                x
                for x in self.repos.values()
                if x.owner.lower() == owner.lower() and x.fork_of == repo.full_name
            ),
            None,
        )
        if fork is None:
            raise ApiError(
                422,
                "Validation Failed",
                [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
            )
        return fork, ref

    def issue(self, repo: str, number: int) -> Issue:
        return self.repo(repo).issues[number]

    def add_comment(self, repo: str, number: int, body: str, user: str = "octocat") -> Comment:
        with self.lock:
            self.issue(repo, number)
            self.user(user)
            now = time.time()
            comment = Comment(
                self.next_id(), self.repo(repo).full_name, number, body, user, now, now
            )
            self.comments_by_id[comment.id] = comment
            return comment

    def comments(self, repo: str, number: int) -> list[Comment]:
        """The issue's or pull's comments, oldest first."""
        full = self.repo(repo).full_name
        return [c for c in self.comments_by_id.values() if c.repo == full and c.number == number]

    # --- webhook deliveries --------------------------------------------------------------
    def add_delivery(
        self,
        event: str,
        action: str | None = None,
        *,
        status_code: int = 200,
        delivered_at: float | None = None,
        guid: str | None = None,
        redelivery: bool = False,
        payload: dict[str, Any] | None = None,
        installation_id: int | None = None,
        repository_id: int | None = None,
    ) -> Delivery:
        """Record a delivery for GET /app/hook/deliveries (newest is listed first)."""
        with self.lock:
            d = Delivery(
                self.next_id(),
                guid or str(uuid.uuid4()),
                event,
                action,
                time.time() if delivered_at is None else delivered_at,
                status_code,
                redelivery,
                installation_id=installation_id,
                repository_id=repository_id,
                payload=dict(payload or {}),
            )
            self.deliveries.append(d)
            return d
