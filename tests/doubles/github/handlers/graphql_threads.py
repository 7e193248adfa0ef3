"""GraphQL objects for review threads: `repository { pullRequest { reviewThreads } }` and the
`resolveReviewThread` / `unresolveReviewThread` mutations
(https://docs.github.com/en/graphql/reference/objects#pullrequestreviewthread)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from tests.doubles.github import shapes
from tests.doubles.github.api import ApiError, Ctx, iso
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Issue, Repo
from tests.doubles.github.threads import Entry, Thread, locate, threads

Obj = dict[str, Any]
MAX_PAGE = 100


class GraphQLError(Exception):
    """A field's error: its value is null and the answer's `errors` says why, HTTP 200."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type, self.message = type_, message


def _actor(ctx: Ctx, login: str) -> Obj:
    user = ctx.state.user(login)
    # GraphQL spells a bot's login without REST's "[bot]" suffix:
    # https://github.com/zxkane/autonomous-dev-team/pull/395
    shown = user.login.removesuffix("[bot]") if user.type == "Bot" else user.login
    return {"__typename": user.type, "login": shown, "url": ctx.web(f"/{shown}")}


def _cursor(n: int) -> str:
    return base64.b64encode(f"cursor:v2:{n}".encode()).decode()


def connection(items: list[Obj], args: dict[str, Any], name: str) -> Obj:
    """A page of `items` by `first` and `after`, with edges, nodes and pageInfo."""
    first = args.get("first")
    if first is None and args.get("last") is None:
        raise GraphQLError(
            "MISSING_PAGINATION_BOUNDARIES",
            f"You must provide a `first` or `last` value to properly paginate the `{name}` "
            "connection.",
        )
    if first is None:
        raise GraphQLError("INVALID_ARGUMENTS", "the GitHub double pages with `first` only")
    if int(first) > MAX_PAGE:
        raise GraphQLError(
            "EXCESSIVE_PAGINATION",
            f"Requesting {first} records on the `{name}` connection exceeds the `first` limit "
            f"of {MAX_PAGE} records.",
        )
    start = 0
    if args.get("after"):
        try:
            start = int(base64.b64decode(args["after"]).decode().rpartition(":")[2])
        except ValueError as exc:
            raise GraphQLError(
                "INVALID_CURSOR_ARGUMENTS",
                f"`{args['after']}` does not appear to be a valid cursor.",
            ) from exc
    page = items[start : start + int(first)]
    edges = [{"cursor": _cursor(start + i + 1), "node": node} for i, node in enumerate(page)]
    return {
        "__typename": f"{name[0].upper()}{name[1:]}Connection",
        "totalCount": len(items),
        "nodes": page,
        "edges": edges,
        "pageInfo": {
            "__typename": "PageInfo",
            "hasNextPage": start + len(page) < len(items),
            "hasPreviousPage": start > 0,
            "startCursor": edges[0]["cursor"] if edges else None,
            "endCursor": edges[-1]["cursor"] if edges else None,
        },
    }


def _comment(ctx: Ctx, repo: Repo, issue: Issue, t: Thread, e: Entry) -> Obj:
    root = t.root
    return {
        "__typename": "PullRequestReviewComment",
        "id": shapes.node_id("PRRC", e.id),
        "databaseId": e.id,
        "body": e.body,
        "author": _actor(ctx, e.user),
        "createdAt": iso(e.created_at),
        "updatedAt": iso(e.created_at),
        "url": ctx.web(f"/{repo.full_name}/pull/{issue.number}#discussion_r{e.id}"),
        "path": root["path"],
        "diffHunk": root.get("diff_hunk") or "",
        "outdated": t.placement.outdated,
        "line": t.placement.line,
        "startLine": t.placement.start_line,
        "originalLine": root.get("line"),
        "originalStartLine": root.get("start_line"),
        "replyTo": None
        if e.in_reply_to_id is None
        else {"id": shapes.node_id("PRRC", e.in_reply_to_id), "databaseId": e.in_reply_to_id},
        "pullRequestReview": {"id": shapes.node_id("PRR", e.review_id), "databaseId": e.review_id},
        "commit": {"oid": t.review.commit_id if t.placement.outdated else t.head_sha},
        "originalCommit": {"oid": t.review.commit_id},
    }


def _may_resolve(ctx: Ctx, repo: Repo, issue: Issue) -> bool:
    """GitHub lets people with write access, and the PR's author, resolve its threads."""
    is_author = ctx.identity.kind == "user" and ctx.identity.login == issue.user
    try:
        authorize(
            ctx.state, ctx.identity, repo, "pull_requests", "write", "read" if is_author else None
        )
    except ApiError:
        return False
    return True


def thread_obj(ctx: Ctx, repo: Repo, issue: Issue, t: Thread) -> Obj:
    root, where = t.root, t.placement
    may = _may_resolve(ctx, repo, issue)
    return {
        "__typename": "PullRequestReviewThread",
        "id": t.node_id,
        "isResolved": t.resolved_by is not None,
        "isOutdated": where.outdated,
        "isCollapsed": t.resolved_by is not None,
        "resolvedBy": None if t.resolved_by is None else _actor(ctx, t.resolved_by),
        "viewerCanResolve": may and t.resolved_by is None,
        "viewerCanUnresolve": may and t.resolved_by is not None,
        "path": root["path"],
        "line": where.line,
        "startLine": where.start_line,
        "originalLine": root.get("line"),
        "originalStartLine": root.get("start_line"),
        "diffSide": root.get("side") or "RIGHT",
        "startDiffSide": root.get("start_side"),
        "subjectType": "LINE",
        "comments": lambda args: connection(
            [_comment(ctx, repo, issue, t, e) for e in t.entries], args, "pullRequestReviewComment"
        ),
    }


def _pull_obj(ctx: Ctx, repo: Repo, issue: Issue) -> Obj:
    assert issue.pull is not None
    return {
        "__typename": "PullRequest",
        "id": shapes.node_id("PR", issue.id),
        "number": issue.number,
        "title": issue.title,
        "url": ctx.web(f"/{repo.full_name}/pull/{issue.number}"),
        "author": _actor(ctx, issue.user),
        "headRefName": issue.pull.head_ref,
        "headRefOid": issue.pull.head_sha,
        "baseRefName": issue.pull.base_ref,
        "reviewThreads": lambda args: connection(
            [thread_obj(ctx, repo, issue, t) for t in threads(ctx, repo, issue)],
            args,
            "pullRequestReviewThread",
        ),
    }


def _repository(ctx: Ctx) -> Callable[[dict[str, Any]], Obj]:
    def run(args: dict[str, Any]) -> Obj:
        full = f"{args.get('owner')}/{args.get('name')}"
        repo = ctx.state.find_repo(full)
        try:
            if repo is None:
                raise ApiError(404, "Not Found")
            authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
        except ApiError as exc:
            raise GraphQLError(
                "NOT_FOUND", f"Could not resolve to a Repository with the name '{full}'."
            ) from exc

        def pull(pr_args: dict[str, Any]) -> Obj:
            number = pr_args.get("number")
            found = repo.issues.get(int(number or 0))
            if found is None or found.pull is None:
                raise GraphQLError(
                    "NOT_FOUND", f"Could not resolve to a PullRequest with the number of {number}."
                )
            return _pull_obj(ctx, repo, found)

        return {
            "__typename": "Repository",
            "id": shapes.node_id("R", repo.id),
            "name": repo.name,
            "nameWithOwner": repo.full_name,
            "owner": _actor(ctx, repo.owner),
            "pullRequest": pull,
        }

    return run


def query_fields(ctx: Ctx) -> Obj:
    viewer = ctx.state.user(ctx.identity.login or "ghost")
    return {
        "repository": _repository(ctx),
        "viewer": {"__typename": viewer.type, "login": viewer.login},
    }


def _set_resolved(ctx: Ctx, resolved: bool) -> Callable[[dict[str, Any]], Obj]:
    def run(args: dict[str, Any]) -> Obj:
        thread_id = str((args.get("input") or {}).get("threadId") or "")
        try:
            root_id = int(base64.b64decode(thread_id).decode().removeprefix("PRRT"))
        except ValueError:
            root_id = 0
        found = locate(ctx.state, root_id)
        if found is None or found[1]["id"] != root_id:
            raise GraphQLError(
                "NOT_FOUND", f"Could not resolve to a node with the global id of '{thread_id}'"
            )
        repo = ctx.state.repo(found[0].repo)
        issue = repo.issues[found[0].number]
        if not _may_resolve(ctx, repo, issue):
            raise GraphQLError(
                "FORBIDDEN",
                f"{ctx.identity.login} does not have the correct permissions to execute "
                f"`{'Resolve' if resolved else 'Unresolve'}ReviewThread`",
            )
        if resolved:
            ctx.state.resolved_threads.setdefault(root_id, ctx.identity.login or "ghost")
        else:
            ctx.state.resolved_threads.pop(root_id, None)
        (t,) = [t for t in threads(ctx, repo, issue) if t.root["id"] == root_id]
        return {"__typename": "Payload", "thread": thread_obj(ctx, repo, issue, t)}

    return run


def mutation_fields(ctx: Ctx) -> Obj:
    return {
        "resolveReviewThread": _set_resolved(ctx, True),
        "unresolveReviewThread": _set_resolved(ctx, False),
    }
