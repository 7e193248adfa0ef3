"""A pull request's review threads through GraphQL: list them with their comments, resolve one.

REST has review comments but no threads and no way to resolve one; GraphQL has both
(https://docs.github.com/en/graphql/reference/objects#pullrequestreviewthread).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from github import Github

THREADS = """
query($owner: String!, $name: String!, $number: Int!, $cursor: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 50, after: $cursor) {
        nodes {
          id isResolved isOutdated path line startLine originalLine originalStartLine diffSide
          comments(first: 50) { nodes { id databaseId body author { login __typename } } }
        }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}
"""
RESOLVE = """
mutation($threadId: ID!) {
  resolveReviewThread(input: {threadId: $threadId}) { thread { id isResolved } }
}
"""
MAX_PAGES = 20  # 1,000 threads: more than any pull request a person reviews


@dataclass(frozen=True)
class ThreadComment:
    """One comment of a thread; `id` is its REST id (GraphQL's `databaseId`)."""

    id: int
    body: str
    author: str


@dataclass(frozen=True)
class Thread:
    """A review thread. `line`/`start_line` are on the pull request's current head (None when
    GitHub calls it outdated); `original_line` on the commit it was written on."""

    id: str
    resolved: bool
    outdated: bool
    path: str
    line: int | None
    start_line: int | None
    original_line: int | None
    side: str
    comments: tuple[ThreadComment, ...]

    @property
    def root(self) -> ThreadComment | None:
        """The comment that opened the thread: replies go to it."""
        return self.comments[0] if self.comments else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _thread(node: Mapping[str, Any]) -> Thread | None:
    comments = []
    for c in (node.get("comments") or {}).get("nodes") or []:
        cid = _int(c.get("databaseId"))
        if cid is not None:
            who = c.get("author") or {}  # null: a deleted account
            author = _str(who.get("login"))
            # GraphQL names an App's bot without REST's `[bot]` suffix: put it back, so one
            # login means one account (https://docs.github.com/en/graphql/reference/objects#bot).
            if who.get("__typename") == "Bot" and author and not author.endswith("[bot]"):
                author += "[bot]"
            comments.append(ThreadComment(cid, _str(c.get("body")), author))
    if not isinstance(node.get("id"), str):
        return None
    return Thread(
        id=node["id"],
        resolved=node.get("isResolved") is True,
        outdated=node.get("isOutdated") is True,
        path=_str(node.get("path")),
        line=_int(node.get("line")),
        start_line=_int(node.get("startLine")),
        original_line=_int(node.get("originalLine")),
        side=_str(node.get("diffSide")) or "RIGHT",
        comments=tuple(comments),
    )


def review_threads(client: Github, repo: str, number: int) -> list[Thread]:
    """Every review thread of pull request `number` of `repo` (owner/name), oldest first."""
    owner, name = repo.split("/", 1)
    found: list[Thread] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        variables = {"owner": owner, "name": name, "number": number, "cursor": cursor}
        _, data = client.requester.graphql_query(THREADS, variables)
        pull = ((data.get("data") or {}).get("repository") or {}).get("pullRequest") or {}
        threads = pull.get("reviewThreads") or {}
        found += [t for node in threads.get("nodes") or [] if (t := _thread(node)) is not None]
        page = threads.get("pageInfo") or {}
        cursor = page.get("endCursor")
        if not page.get("hasNextPage") or not isinstance(cursor, str):
            break
    return found


def resolve_thread(client: Github, thread_id: str) -> None:
    """Mark the thread resolved (GithubException when GitHub refuses)."""
    client.requester.graphql_query(RESOLVE, {"threadId": thread_id})
