"""Review threads: a review comment and its replies, where it sits at the PR's head now, and
whether the head has moved past it (outdated)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.doubles.github import gitrepo, shapes
from tests.doubles.github.model import Issue, Repo, Review, ReviewReply

if TYPE_CHECKING:
    from tests.doubles.github.api import Ctx
    from tests.doubles.github.state import State

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Placement:
    """Where a thread's lines are at the head: `line`/`start_line` are None when outdated."""

    outdated: bool
    line: int | None
    start_line: int | None


@dataclass(frozen=True)
class Entry:
    """One comment of a thread (the review comment that started it, or a reply)."""

    id: int
    review_id: int
    user: str
    body: str
    created_at: float
    in_reply_to_id: int | None


@dataclass
class Thread:
    review: Review
    root: dict[str, Any]  # the review comment as create_review kept it (review_threads.py)
    replies: list[ReviewReply]
    resolved_by: str | None
    placement: Placement
    head_sha: str

    @property
    def node_id(self) -> str:
        return thread_node_id(self.root["id"])

    @property
    def entries(self) -> list[Entry]:
        v, root = self.review, self.root
        first = Entry(root["id"], v.id, v.user, root["body"], v.submitted_at, None)
        rest = [
            Entry(r.id, r.review_id, r.user, r.body, r.created_at, root["id"]) for r in self.replies
        ]
        return [first, *rest]


def thread_node_id(root_id: int) -> str:
    """The GraphQL id of the thread the review comment `root_id` started."""
    return shapes.node_id("PRRT", root_id)


def _changed_hunks(
    git_dir: Path, old: str, new: str, path: str
) -> list[tuple[int, int, int]] | None:
    """(old start, old count, new count) of each hunk of `path` from `old` to `new`; None: the
    file is gone at `new`."""
    if gitrepo.read_object(git_dir, new, path) is None:
        return None
    diff = gitrepo.git(git_dir, "diff", "--no-color", "--no-renames", "-U0", old, new, "--", path)
    out = []
    for line in diff.split("\n"):
        if (m := _HUNK.match(line)) is not None:
            out.append((int(m.group(1)), int(m.group(2) or 1), int(m.group(4) or 1)))
    return out


def placement(git_dir: Path, original: str, head: str, root: dict[str, Any]) -> Placement:
    """Where `root`'s lines are at `head`. The double's rule (GitHub's is not documented, see
    https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/reviewing-changes-in-pull-requests/commenting-on-a-pull-request):
    a RIGHT-side thread on lines start..line of the commit `original` is outdated at `head` when
    the file is gone there, or `git diff -U0 original head -- path` has a hunk that replaces or
    removes any of those lines, or inserts lines between two of them; otherwise it moves by the
    lines the hunks above it added or removed. LEFT-side threads (the base's lines) and
    position-only comments never become outdated here."""
    line, start = root.get("line"), root.get("start_line")
    if line is None or root.get("side") == "LEFT" or original == head:
        return Placement(False, line, start)
    hunks = _changed_hunks(git_dir, original, head, root["path"])
    if hunks is None:
        return Placement(True, None, None)
    first = start if start is not None else line
    shift = 0
    for old_start, old_count, new_count in hunks:
        if old_count == 0:  # lines inserted after old line `old_start`
            if first <= old_start < line:
                return Placement(True, None, None)
            if old_start < first:
                shift += new_count
        elif old_start <= line and old_start + old_count - 1 >= first:
            return Placement(True, None, None)
        elif old_start + old_count - 1 < first:
            shift += new_count - old_count
    return Placement(False, line + shift, None if start is None else start + shift)


def threads(ctx: Ctx, repo: Repo, issue: Issue) -> list[Thread]:
    """The pull request's review threads, oldest first (pending reviews only to their author)."""
    assert issue.pull is not None
    shapes.refresh_pull(ctx, repo, issue)
    head = issue.pull.head_sha
    git_dir = (ctx.state.find_repo(issue.pull.head_repo) or repo).git_dir
    out = []
    for v in sorted(ctx.state.reviews.values(), key=lambda v: v.id):
        if v.repo != repo.full_name or v.number != issue.number:
            continue
        if v.event == "PENDING" and v.user != ctx.identity.login:
            continue
        for root in v.comments:
            replies = sorted(
                (r for r in ctx.state.review_replies.values() if r.root == root["id"]),
                key=lambda r: r.id,
            )
            where = placement(git_dir, v.commit_id, head, root)
            resolved = ctx.state.resolved_threads.get(root["id"])
            out.append(Thread(v, root, replies, resolved, where, head))
    return out


def locate(state: State, comment_id: int) -> tuple[Review, dict[str, Any]] | None:
    """The review and root comment of the thread that review comment `comment_id` is in."""
    reply = state.review_replies.get(comment_id)
    wanted = reply.root if reply is not None else comment_id
    for v in state.reviews.values():
        for root in v.comments:
            if root["id"] == wanted:
                return v, root
    return None
