"""Test-side helpers for reviews by people: a submitted review with inline comments (each starts a
thread, checked against the diff as the REST API checks them) and replies in a thread."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Literal

from tests.doubles.github.api import ApiError, Ctx
from tests.doubles.github.model import Issue, Repo, Review, ReviewReply
from tests.doubles.github.threads import locate, thread_node_id

ReviewState = Literal["COMMENTED", "CHANGES_REQUESTED", "APPROVED"]
_EVENTS = {"COMMENTED": "COMMENT", "CHANGES_REQUESTED": "REQUEST_CHANGES", "APPROVED": "APPROVE"}


class ReviewActivity:
    """Mixed into State."""

    if TYPE_CHECKING:
        lock: threading.RLock
        reviews: dict[int, Review]
        review_replies: dict[int, ReviewReply]

        def repo(self, full_name: str) -> Repo: ...
        def issue(self, repo: str, number: int) -> Issue: ...
        def user(self, login: str, type: str = "User") -> Any: ...
        def next_id(self) -> int: ...

    def _ctx(self) -> Ctx:
        return Ctx(self, "POST", "", {}, {}, b"", "")  # type: ignore[arg-type]

    def submit_review(
        self,
        repo: str,
        number: int,
        user: str,
        body: str = "",
        state: ReviewState = "COMMENTED",
        comments: list[dict[str, Any]] | None = None,
    ) -> Review:
        """A review `user` submitted on pull request `number` at its head. `comments` are
        {"path", "line", "body"} with optional "start_line" and "side" (RIGHT by default); a
        comment off the diff raises the ApiError (422) the REST API would answer."""
        from tests.doubles.github.handlers import review_threads

        if state not in _EVENTS:
            raise ValueError(state)
        with self.lock:
            r, issue = self.repo(repo), self.issue(repo, number)
            if issue.pull is None:
                raise KeyError(f"{repo}#{number} is not a pull request")
            if state != "COMMENTED" and user.lower() == issue.user.lower():
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    ["Can not approve your own pull request"]
                    if state == "APPROVED"
                    else ["Can not request changes on your own pull request"],
                )
            self.user(user)
            ctx = self._ctx()
            given = [{"side": "RIGHT", **c} for c in comments or []]
            checked = review_threads.check_comments(ctx, r, issue, given)
            review = Review(
                self.next_id(),
                r.full_name,
                number,
                self.user(user).login,
                _EVENTS[state],
                body,
                issue.pull.head_sha,
                checked,
                time.time(),
            )
            self.reviews[review.id] = review
            return review

    def reply_to_review_comment(
        self, repo: str, number: int, comment_id: int, user: str, body: str
    ) -> ReviewReply:
        """`user`'s reply in the thread of review comment `comment_id` (a reply to a reply
        joins the same thread, as on GitHub)."""
        from tests.doubles.github.handlers import review_comments

        with self.lock:
            r, issue = self.repo(repo), self.issue(repo, number)
            self.user(user)
            made = review_comments.add_reply(
                self._ctx(), r, issue, comment_id, self.user(user).login, body
            )
            return self.review_replies[made]

    def thread_id(self, comment_id: int) -> str:
        """The GraphQL node id of the review thread that review comment `comment_id` is in."""
        with self.lock:
            found = locate(self, comment_id)  # type: ignore[arg-type]
            if found is None:
                raise KeyError(comment_id)
            return thread_node_id(found[1]["id"])

    def thread_resolved_by(self, comment_id: int) -> str | None:
        """Who resolved the thread of review comment `comment_id` (None: unresolved)."""
        with self.lock:
            found = locate(self, comment_id)  # type: ignore[arg-type]
            if found is None:
                raise KeyError(comment_id)
            return self.resolved_threads.get(found[1]["id"])  # type: ignore[attr-defined]
