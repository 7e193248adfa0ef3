"""Bot comments with a hidden marker, found again and edited in place rather than piled up."""

from __future__ import annotations

from github.Issue import Issue
from github.IssueComment import IssueComment


def marker(key: str) -> str:
    return f"<!-- onloop:{key} -->"


def upsert_comment(issue: Issue, key: str, body: str, author: str | None) -> IssueComment:
    """Edit the comment carrying `key`'s marker (written by `author`), or create it."""
    tag = marker(key)
    text = f"{tag}\n{body}"
    for comment in issue.get_comments():
        if tag in (comment.body or "") and (author is None or comment.user.login == author):
            if comment.body != text:
                comment.edit(text)
            return comment
    return issue.create_comment(text)


def details(summary: str, text: str, limit: int = 3000) -> str:
    """Fold a log into a <details> block, keeping its tail."""
    tail = text[-limit:]
    return f"<details><summary>{summary}</summary>\n\n```\n{tail}\n```\n</details>"
