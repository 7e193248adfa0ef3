"""Bot comments with a hidden marker, found again and edited in place rather than piled up."""

from __future__ import annotations

import re

from github.Issue import Issue
from github.IssueComment import IssueComment
from github.Repository import Repository

from app.core.markdown import fenced, plain

_JOB_NOTICE = re.compile(r"^job-(\d+)-")


def marker(key: str) -> str:
    return f"<!-- onloop:{key} -->"


def family(key: str) -> str | None:
    """The marker prefix shared by a job's notices and status (`job-<id>-<what>`): onloop
    keeps one comment per job for them, edited in place, rather than a pile of comments."""
    m = _JOB_NOTICE.match(key)
    return f"<!-- onloop:job-{m.group(1)}-" if m else None


def thread(repo: Repository, number: int) -> Issue:
    """Issue or pull request `number` of `repo`, to comment on: lazy, so no GET of the issue
    that only its URL is needed from (PyGithub's `get_issue` reads it at once; an attribute
    read here still does)."""
    return Issue(repo.requester.withLazy(True), url=f"{repo.url}/issues/{number}")


def upsert_comment(issue: Issue, key: str, body: str, author: str | None) -> IssueComment:
    """Edit the comment carrying `key`'s marker, or its family's (written by `author`), or
    create it."""
    tag, kin = marker(key), family(key)
    text = f"{tag}\n{body}"
    for comment in issue.get_comments():
        found = comment.body or ""
        if (tag in found or (kin and kin in found)) and (
            author is None or comment.user.login == author
        ):
            if comment.body != text:
                comment.edit(text)
            return comment
    return issue.create_comment(text)


def fold(summary: str, markdown: str) -> str:
    """Fold Markdown onloop wrote into a <details> block; the summary is text, escaped."""
    return f"<details><summary>{plain(summary)}</summary>\n\n{markdown}\n</details>"


def details(summary: str, text: str, limit: int = 3000) -> str:
    """Fold a log's tail into a <details> block, fenced so that nothing in it is Markdown."""
    return fold(summary, fenced(text[-limit:]))


def upsert_issue(repo: Repository, key: str, title: str, body: str, author: str | None) -> Issue:
    """Edit the open issue by `author` carrying `key`'s marker, or open it: what onloop says
    about a repository with no thread to say it on (a schedule it skips)."""
    text = f"{marker(key)}\n{body}"
    issue = open_issue(repo, key, author)
    if issue is None:
        return repo.create_issue(title=title, body=text)
    if issue.body != text or issue.title != title:
        issue.edit(title=title, body=text)
    return issue


def open_issue(repo: Repository, key: str, author: str | None) -> Issue | None:
    """The open issue by `author` carrying `key`'s marker, if there is one."""
    for issue in repo.get_issues(state="open"):
        if marker(key) in (issue.body or "") and author in (None, issue.user.login):
            return issue
    return None
