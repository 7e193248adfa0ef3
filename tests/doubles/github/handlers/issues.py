"""Issues, issue comments, reactions and labels."""

from __future__ import annotations

import time

from tests.doubles.github import shapes
from tests.doubles.github.api import ApiError, Ctx, Response, not_found, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Comment, Issue, Reaction, Repo

REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


def _issue(ctx: Ctx, repo: Repo) -> Issue:
    found = repo.issues.get(ctx.params["number"])
    if found is None:
        raise not_found()
    return found


def _missing(field: str, resource: str = "Issue") -> ApiError:
    return ApiError(
        422, "Validation Failed", [{"resource": resource, "field": field, "code": "missing_field"}]
    )


def list_issues(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "read")
    state = ctx.arg("state", "open")
    items = [
        i
        for i in sorted(repo.issues.values(), key=lambda i: -i.number)
        if state == "all" or i.state == state
    ]
    return paginate(ctx, [shapes.issue(ctx, repo, i) for i in items])


def get_issue(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "read")
    return Response(200, shapes.issue(ctx, repo, _issue(ctx, repo)))


def create_issue(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "write", role="read")
    body = ctx.body_dict()
    if not body.get("title"):
        raise _missing("title")
    issue = ctx.state.create_issue(
        repo.full_name,
        body["title"],
        body.get("body"),
        ctx.identity.login or "ghost",
        body.get("labels") or [],
    )
    return Response(201, shapes.issue(ctx, repo, issue))


def update_issue(ctx: Ctx) -> Response:
    repo = ctx.repo()
    issue = _issue(ctx, repo)
    is_author = ctx.identity.kind == "user" and ctx.identity.login == issue.user
    authorize(
        ctx.state, ctx.identity, repo, "issues", "write", role="read" if is_author else "triage"
    )
    body = ctx.body_dict()
    for key in ("title", "body"):
        if key in body:
            setattr(issue, key, body[key])
    if body.get("state") in ("open", "closed"):
        issue.state = body["state"]
        issue.closed_at = time.time() if issue.state == "closed" else None
    if "labels" in body:
        issue.labels = [x if isinstance(x, str) else x["name"] for x in body["labels"]]
    issue.updated_at = time.time()
    return Response(200, shapes.issue(ctx, repo, issue))


def list_comments(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "read")
    issue = _issue(ctx, repo)
    items = ctx.state.comments(repo.full_name, issue.number)
    return paginate(ctx, [shapes.comment(ctx, c) for c in items])


def create_comment(ctx: Ctx) -> Response:
    """Anyone who can read the repo may comment (installations need issues: write)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "write", role="read")
    issue = _issue(ctx, repo)
    text = ctx.body_dict().get("body")
    if not isinstance(text, str) or not text:
        raise _missing("body", "IssueComment")
    c = ctx.state.add_comment(repo.full_name, issue.number, text, ctx.identity.login or "ghost")
    return Response(201, shapes.comment(ctx, c))


def _comment(ctx: Ctx, repo: Repo) -> Comment:
    c = ctx.state.comments_by_id.get(ctx.params["id"])
    if c is None or c.repo != repo.full_name:
        raise not_found()
    return c


def get_comment(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "read")
    return Response(200, shapes.comment(ctx, _comment(ctx, repo)))


def _authorize_edit(ctx: Ctx, repo: Repo, c: Comment) -> None:
    is_author = ctx.identity.login is not None and ctx.identity.login == c.user
    authorize(
        ctx.state, ctx.identity, repo, "issues", "write", role="read" if is_author else "write"
    )


def update_comment(ctx: Ctx) -> Response:
    """Authors edit their own comments; others need write (installations: issues: write)."""
    repo = ctx.repo()
    c = _comment(ctx, repo)
    _authorize_edit(ctx, repo, c)
    text = ctx.body_dict().get("body")
    if not isinstance(text, str) or not text:
        raise _missing("body", "IssueComment")
    c.body = text
    c.updated_at = time.time()
    return Response(200, shapes.comment(ctx, c))


def delete_comment(ctx: Ctx) -> Response:
    repo = ctx.repo()
    c = _comment(ctx, repo)
    _authorize_edit(ctx, repo, c)
    del ctx.state.comments_by_id[c.id]
    return Response(204)


def list_reactions(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "read")
    return paginate(ctx, [shapes.reaction(ctx, x) for x in _comment(ctx, repo).reactions])


def create_reaction(ctx: Ctx) -> Response:
    """201 for a new reaction, 200 when this user already reacted with the same content."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "write", role="read")
    c = _comment(ctx, repo)
    content = ctx.body_dict().get("content")
    if content not in REACTIONS:
        raise ApiError(
            422,
            "Validation Failed",
            [{"resource": "Reaction", "field": "content", "code": "invalid"}],
        )
    login = ctx.identity.login or "ghost"
    for existing in c.reactions:
        if existing.user == login and existing.content == content:
            return Response(200, shapes.reaction(ctx, existing))
    reaction = Reaction(ctx.state.next_id(), content, login, time.time())
    c.reactions.append(reaction)
    return Response(201, shapes.reaction(ctx, reaction))


def add_labels(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/issues/{n}/labels with a list or {"labels": [...]}; needs triage."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "write", role="triage")
    issue = _issue(ctx, repo)
    data = ctx.json
    names = data.get("labels") if isinstance(data, dict) else data
    if not isinstance(names, list):
        raise _missing("labels", "Label")
    for name in names:
        name = name if isinstance(name, str) else name.get("name")
        if name not in issue.labels:
            issue.labels.append(name)
    issue.updated_at = time.time()
    return Response(200, [shapes.label(ctx, repo, n) for n in issue.labels])


def remove_label(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "issues", "write", role="triage")
    issue = _issue(ctx, repo)
    if ctx.params["name"] not in issue.labels:
        raise ApiError(404, "Label does not exist")
    issue.labels.remove(ctx.params["name"])
    return Response(200, [shapes.label(ctx, repo, n) for n in issue.labels])
