"""Review comments over REST: a PR's, a review's, one by id, and replies in a thread
(https://docs.github.com/en/rest/pulls/comments)."""

from __future__ import annotations

import time
from typing import Any

from tests.doubles.github import shapes
from tests.doubles.github.api import ApiError, Ctx, Response, iso, not_found, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.handlers import review_threads
from tests.doubles.github.model import Issue, Repo, Review, ReviewReply
from tests.doubles.github.threads import Entry, Thread, locate, threads


def files_of(ctx: Ctx, repo: Repo, issue: Issue) -> dict[str, review_threads.FilePatch]:
    return {f.path: f for f in review_threads.split(review_threads.pull_diff(ctx, repo, issue))}


def comment_json(
    ctx: Ctx,
    repo: Repo,
    issue: Issue,
    t: Thread,
    e: Entry,
    files: dict[str, review_threads.FilePatch],
) -> dict[str, Any]:
    """A review comment as GitHub's REST API shows it; a reply carries its thread's place.
    An outdated one has `line` and `position` null and keeps its `original_*` values."""
    root, where = t.root, t.placement
    position = None
    if not where.outdated and where.line is not None and (f := files.get(root["path"])):
        found = review_threads.locate_line(f, where.line, root.get("side") or "RIGHT")
        position = found[0] if found else None
    elif not where.outdated:
        position = root.get("position")
    api = ctx.api(f"/repos/{repo.full_name}/pulls/comments/{e.id}")
    html = ctx.web(f"/{repo.full_name}/pull/{issue.number}#discussion_r{e.id}")
    pull_url = ctx.api(f"/repos/{repo.full_name}/pulls/{issue.number}")
    out: dict[str, Any] = {
        "url": api,
        "pull_request_review_id": e.review_id,
        "id": e.id,
        "node_id": shapes.node_id("PRRC", e.id),
        "diff_hunk": root.get("diff_hunk") or "",
        "path": root["path"],
        "position": position,
        "original_position": root.get("original_position"),
        "commit_id": t.review.commit_id if where.outdated else t.head_sha,
        "original_commit_id": t.review.commit_id,
        "user": shapes.user(ctx, e.user),
        "body": e.body,
        "created_at": iso(e.created_at),
        "updated_at": iso(e.created_at),
        "html_url": html,
        "pull_request_url": pull_url,
        "author_association": "NONE",
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "pull_request": {"href": pull_url},
        },
        "start_line": where.start_line,
        "original_start_line": root.get("start_line"),
        "start_side": root.get("start_side"),
        "line": where.line,
        "original_line": root.get("line"),
        "side": root.get("side"),
        "subject_type": "line",
    }
    # GitHub leaves `in_reply_to_id` out of a thread's first comment.
    if e.in_reply_to_id is not None:
        out["in_reply_to_id"] = e.in_reply_to_id
    return out


def _flat(ctx: Ctx, repo: Repo, issue: Issue) -> list[tuple[Thread, Entry]]:
    pairs = [(t, e) for t in threads(ctx, repo, issue) for e in t.entries]
    return sorted(pairs, key=lambda pair: pair[1].id)


def list_comments(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/pulls/{n}/comments: every review comment and reply, oldest first."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = review_threads._pull(ctx, repo)
    files = files_of(ctx, repo, issue)
    items = [comment_json(ctx, repo, issue, t, e, files) for t, e in _flat(ctx, repo, issue)]
    return paginate(ctx, items)


def list_review_comments(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments: the comments that review made."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = review_threads._pull(ctx, repo)
    review = ctx.state.reviews.get(ctx.params["id"])
    if review is None or review.repo != repo.full_name or review.number != issue.number:
        raise not_found()
    files = files_of(ctx, repo, issue)
    items = [
        comment_json(ctx, repo, issue, t, e, files)
        for t, e in _flat(ctx, repo, issue)
        if e.review_id == review.id
    ]
    return paginate(ctx, items)


def _find(ctx: Ctx, repo: Repo, comment_id: int) -> tuple[Issue, Thread, Entry]:
    found = locate(ctx.state, comment_id)
    if found is None or found[0].repo != repo.full_name:
        raise not_found()
    issue = repo.issues[found[0].number]
    for t in threads(ctx, repo, issue):
        for e in t.entries:
            if e.id == comment_id:
                return issue, t, e
    raise not_found()


def get_comment(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/pulls/comments/{id}"""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue, t, e = _find(ctx, repo, ctx.params["id"])
    return Response(200, comment_json(ctx, repo, issue, t, e, files_of(ctx, repo, issue)))


def add_reply(ctx: Ctx, repo: Repo, issue: Issue, comment_id: int, user: str, body: str) -> int:
    """Record a reply in the thread of `comment_id`. GitHub files each reply under a review of
    its own (state COMMENTED, empty body, a pull_request_review webhook besides the comment's):
    https://github.com/ghostty-org/discord-bot/pull/324"""
    found = locate(ctx.state, comment_id)
    if found is None or found[0].repo != repo.full_name or found[0].number != issue.number:
        raise not_found()
    if not body:
        raise ApiError(
            422,
            "Validation Failed",
            [{"resource": "PullRequestReviewComment", "field": "body", "code": "missing_field"}],
        )
    assert issue.pull is not None
    now = time.time()
    review = Review(
        ctx.state.next_id(), repo.full_name, issue.number, user, "COMMENT", "",
        issue.pull.head_sha, [], now,
    )  # fmt: skip
    ctx.state.reviews[review.id] = review
    reply = ReviewReply(ctx.state.next_id(), review.id, found[1]["id"], user, body, now)
    ctx.state.review_replies[reply.id] = reply
    return reply.id


def create_reply(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/pulls/{n}/comments/{comment_id}/replies: 201 with the reply."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "write", role="read")
    issue = review_threads._pull(ctx, repo)
    body = ctx.body_dict().get("body")
    made = add_reply(
        ctx, repo, issue, ctx.params["comment_id"], ctx.identity.login or "ghost", str(body or "")
    )
    _, t, e = _find(ctx, repo, made)
    return Response(201, comment_json(ctx, repo, issue, t, e, files_of(ctx, repo, issue)))
