"""What /insights needs from deliveries, written in the delivery's own transaction and from
the payload only (no GitHub call in the webhook path): onloop's pull requests (branches
`onloop/...`) opened and closed, commits pushed to their branches, and reverts of them
pushed to the default branch."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from app.intake.events import Event
from app.intake.payloads import PullRequest, PushCommit
from app.store.campaigns import WAKE, WAKE_REPO
from app.store.fastsql import Sql, Steps
from app.store.models import utcnow

BRANCH_PREFIX = "onloop/"
HEADS = "refs/heads/"
TRAILER = re.compile(r"^Onloop-Job:\s*(\d{1,10})\s*$", re.MULTILINE)
# `git revert` writes "This reverts commit <full sha>." (and, for a merge commit,
# ", reversing changes made to <sha>."): https://git-scm.com/docs/git-revert
REVERTS = re.compile(r"\bThis reverts commit ([0-9a-f]{40})\b")
# A push names up to 2048 commits
# (https://docs.github.com/en/webhooks/webhook-events-and-payloads#push); onloop's branches
# get a few, so past this many the rest of one push is not counted (a statement each, in the
# webhook's path).
MAX_COMMITS = 100

OPENED = (
    "INSERT INTO onloop_pulls (repo, number, head_ref, head_sha, opened_at, merged)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (repo, number) DO UPDATE SET"
    " head_ref = excluded.head_ref, head_sha = excluded.head_sha,"
    " opened_at = COALESCE(onloop_pulls.opened_at, excluded.opened_at)"
)
# Closing counts the person's commits pushed to the branch so far and claims them for this
# pull request: a later pull request on the same branch starts from none.
REWORK = (
    "SELECT count(*) FROM onloop_branch_commits WHERE repo = %s AND branch = %s"
    " AND job_id IS NULL AND pull_number IS NULL"
)
CLAIM = (
    "UPDATE onloop_branch_commits SET pull_number = %s"
    " WHERE repo = %s AND branch = %s AND pull_number IS NULL"
)
CLOSED = (
    "INSERT INTO onloop_pulls (repo, number, head_ref, head_sha, opened_at, closed_at, merged,"
    " merge_sha, rework_commits) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (repo, number) DO UPDATE"
    " SET head_ref = excluded.head_ref, head_sha = excluded.head_sha,"
    " opened_at = COALESCE(onloop_pulls.opened_at, excluded.opened_at),"
    " closed_at = excluded.closed_at, merged = excluded.merged, merge_sha = excluded.merge_sha,"
    " rework_commits = COALESCE(onloop_pulls.rework_commits, 0) + excluded.rework_commits"
)
REOPENED = (
    "UPDATE onloop_pulls SET closed_at = NULL, merged = %s, merge_sha = NULL"
    " WHERE repo = %s AND number = %s"
)
COMMIT = (
    "INSERT INTO onloop_branch_commits (repo, branch, sha, job_id, key, at)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (repo, key) DO NOTHING"
)
# The reverted commit is onloop's when it is a merged pull's merge (or squash) commit or
# head, or a commit with the trailer pushed to one of its branches.
REVERT = (
    "UPDATE onloop_pulls SET reverted_at = %s, revert_sha = %s"
    " WHERE repo = %s AND merged = %s AND reverted_at IS NULL AND (merge_sha = %s"
    " OR head_sha = %s OR head_ref IN (SELECT branch FROM onloop_branch_commits"
    " WHERE repo = %s AND sha = %s AND job_id IS NOT NULL))"
)


def note(sql: Sql, event: Event) -> Steps[None]:
    """Record what `event` tells about onloop's pull requests; nothing for other events."""
    repo = event.repo
    if not repo:
        return
    payload = event.payload
    if event.name == "pull_request":
        pull = payload.get("pull_request", {})
        head = pull.get("head", {})
        # onloop's branches are in the repository itself; a fork's `onloop/x` is not its own.
        own = head.get("repo", {}).get("full_name", "").lower() == repo.lower()
        if own and head.get("ref", "").startswith(BRANCH_PREFIX):
            yield from _pull(sql, repo, event.action or "", pull)
    elif event.name == "push":
        ref = payload.get("ref", "")
        commits = payload.get("commits", [])
        default = payload.get("repository", {}).get("default_branch")
        if ref.startswith(HEADS + BRANCH_PREFIX):
            yield from _branch_commits(sql, repo, ref.removeprefix(HEADS), commits)
        elif default and ref == HEADS + default:
            yield from _reverts(sql, repo, commits)
            yield sql(WAKE_REPO), (sql.ts(utcnow()), repo)  # campaign PRs' base moved


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _pull(sql: Sql, repo: str, action: str, pull: PullRequest) -> Steps[None]:
    number = pull.get("number")
    if number is None:
        return
    head = pull.get("head", {})
    ref, sha = head.get("ref", ""), head.get("sha")
    opened = sql.ts(_time(pull.get("created_at")) or utcnow())
    if action in ("opened", "synchronize", "edited", "ready_for_review"):
        yield sql(OPENED), (repo, number, ref[:255], sha, opened, False)
    elif action == "closed":
        closed = sql.ts(_time(pull.get("closed_at")) or utcnow())
        merged = bool(pull.get("merged"))
        merge_sha = pull.get("merge_commit_sha") if merged else None
        rows = yield sql(REWORK), (repo, ref[:255])
        rework = int(rows[0][0]) if rows else 0
        yield sql(CLAIM), (number, repo, ref[:255])
        values = (repo, number, ref[:255], sha, opened, closed, merged, merge_sha, rework)
        yield sql(CLOSED), values
    elif action == "reopened":
        yield sql(REOPENED), (False, repo, number)
    if action in ("closed", "reopened", "synchronize"):  # a campaign's PR: look at it again
        yield sql(WAKE), (sql.ts(utcnow()), repo, number)


def _branch_commits(sql: Sql, repo: str, branch: str, commits: list[PushCommit]) -> Steps[None]:
    now = sql.ts(utcnow())
    for commit in commits[:MAX_COMMITS]:
        sha, message = commit.get("id"), commit.get("message", "")
        if not sha:
            continue
        found = TRAILER.search(message)
        job_id = int(found.group(1)) if found else None
        key = hashlib.sha256(f"{branch}\0{message}".encode()).hexdigest()
        yield sql(COMMIT), (repo, branch[:255], sha, job_id, key, now)


def _reverts(sql: Sql, repo: str, commits: list[PushCommit]) -> Steps[None]:
    now = sql.ts(utcnow())
    for commit in commits:
        revert_sha = commit.get("id")
        for reverted in REVERTS.findall(commit.get("message", "")):
            values = (now, revert_sha, repo, True, reverted, reverted, repo, reverted)
            yield sql(REVERT), values
