"""Pull requests, the pulls of a commit, reviews; merging and approving are refused and recorded."""

from __future__ import annotations

import time

from tests.doubles.github import gitrepo, shapes
from tests.doubles.github.api import ApiError, Ctx, Response, not_found, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.handlers import repos, review_threads
from tests.doubles.github.model import Issue, Refusal, Repo, Review

NEVER = "onloop must never {what}: the GitHub double refuses it"


def _pull(ctx: Ctx, repo: Repo) -> Issue:
    found = repo.issues.get(ctx.params["number"])
    if found is None or found.pull is None:
        raise not_found()
    shapes.refresh_pull(ctx, repo, found)
    return found


def _invalid(message: str) -> ApiError:
    return ApiError(
        422,
        "Validation Failed",
        [{"resource": "PullRequest", "code": "custom", "message": message}],
    )


def list_pulls(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/pulls?state=&head=owner:branch&base=, newest first."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    state, head, base = ctx.arg("state", "open"), ctx.arg("head"), ctx.arg("base")
    out = []
    for issue in sorted(repo.issues.values(), key=lambda i: -i.number):
        p = issue.pull
        if p is None or (state != "all" and issue.state != state):
            continue
        if base and p.base_ref != base:
            continue
        if head:
            owner, _, ref = head.partition(":")
            head_owner = (ctx.state.find_repo(p.head_repo) or repo).owner
            if not ref or owner.lower() != head_owner.lower() or ref != p.head_ref:
                continue
        out.append(shapes.pull(ctx, repo, issue))
    if ctx.arg("direction") == "asc":
        out.reverse()
    return paginate(ctx, out)


def get_pull(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    return Response(200, shapes.pull(ctx, repo, _pull(ctx, repo)))


def create_pull(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/pulls: anyone who can read the base repo may open one; the head
    branch must exist (pushing it is what needs write)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "write", role="read")
    body = ctx.body_dict()
    for field in ("head", "base"):
        if not body.get(field):
            raise ApiError(
                422,
                "Validation Failed",
                [{"resource": "PullRequest", "field": field, "code": "missing_field"}],
            )
    if not body.get("title") and not body.get("issue"):
        raise ApiError(
            422,
            "Validation Failed",
            [{"resource": "PullRequest", "field": "title", "code": "missing_field"}],
        )
    head_repo, head_ref = ctx.state.resolve_head(repo, body["head"])
    head_sha = gitrepo.rev(head_repo.git_dir, f"refs/heads/{head_ref}")
    base_sha = gitrepo.rev(repo.git_dir, f"refs/heads/{body['base']}")
    if head_sha is None or base_sha is None:
        raise ApiError(
            422,
            "Validation Failed",
            [
                {
                    "resource": "PullRequest",
                    "field": "head" if head_sha is None else "base",
                    "code": "invalid",
                }
            ],
        )
    for other in repo.issues.values():
        p = other.pull
        if (
            p
            and other.state == "open"
            and (p.head_repo, p.head_ref, p.base_ref)
            == (head_repo.full_name, head_ref, body["base"])
        ):
            raise _invalid(f"A pull request already exists for {head_repo.owner}:{head_ref}.")
    if head_repo is repo and gitrepo.is_ancestor(repo.git_dir, head_sha, base_sha):
        raise _invalid(f"No commits between {body['base']} and {head_ref}")
    issue = ctx.state.create_pull(
        repo.full_name,
        body["head"],
        body["base"],
        body.get("title") or "",
        body.get("body"),
        ctx.identity.login or "ghost",
        maintainer_can_modify=bool(body.get("maintainer_can_modify", head_repo is not repo)),
        draft=bool(body.get("draft", False)),
    )
    return Response(201, shapes.pull(ctx, repo, issue))


def update_pull(ctx: Ctx) -> Response:
    repo = ctx.repo()
    issue = _pull(ctx, repo)
    is_author = ctx.identity.kind == "user" and ctx.identity.login == issue.user
    authorize(
        ctx.state,
        ctx.identity,
        repo,
        "pull_requests",
        "write",
        role="read" if is_author else "triage",
    )
    body = ctx.body_dict()
    for key in ("title", "body"):
        if key in body:
            setattr(issue, key, body[key])
    if body.get("state") in ("open", "closed"):
        if body["state"] != issue.state:
            ctx.state.log_pull(
                "opened" if body["state"] == "open" else "closed", repo.full_name, issue.number
            )
        issue.state = body["state"]
        issue.closed_at = time.time() if issue.state == "closed" else None
    if body.get("base"):
        assert issue.pull is not None
        issue.pull.base_ref = body["base"]
    if "maintainer_can_modify" in body:
        assert issue.pull is not None
        issue.pull.maintainer_can_modify = bool(body["maintainer_can_modify"])
    issue.updated_at = time.time()
    return Response(200, shapes.pull(ctx, repo, issue))


def commit_pulls(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/commits/{sha}/pulls: pulls whose head contains the commit."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    sha = ctx.params["sha"]
    out = []
    for issue in sorted(repo.issues.values(), key=lambda i: -i.number):
        if issue.pull is None:
            continue
        shapes.refresh_pull(ctx, repo, issue)
        p = issue.pull
        head_repo = ctx.state.find_repo(p.head_repo) or repo
        if p.head_sha.startswith(sha) or (
            gitrepo.is_ancestor(head_repo.git_dir, sha, p.head_sha)
            and not gitrepo.is_ancestor(repo.git_dir, sha, p.base_sha)
        ):
            out.append(shapes.pull(ctx, repo, issue))
    return paginate(ctx, out)


def _refuse(ctx: Ctx, kind: str, repo: Repo, number: int) -> ApiError:
    refusal = Refusal(kind, repo.full_name, number, ctx.identity, ctx.json)  # type: ignore[arg-type]
    ctx.state.refusals.append(refusal)
    return ApiError(403, NEVER.format(what=kind))


def merge_pull(ctx: Ctx) -> Response:
    repo = ctx.repo()
    issue = _pull(ctx, repo)
    raise _refuse(ctx, "merge", repo, issue.number)


def list_reviews(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = _pull(ctx, repo)
    items = [
        v
        for v in ctx.state.reviews.values()
        if v.repo == repo.full_name
        and v.number == issue.number
        and (v.event != "PENDING" or v.user == ctx.identity.login)  # drafts: their author's
    ]
    return paginate(ctx, [shapes.review(ctx, v) for v in sorted(items, key=lambda v: v.id)])


def list_commits(ctx: Ctx) -> Response:
    """GET .../pulls/{n}/commits: the head's commits not on the base, oldest first (GitHub
    lists at most 250: https://docs.github.com/en/rest/pulls/pulls#list-commits-on-a-pull-request)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = _pull(ctx, repo)
    assert issue.pull is not None
    p = issue.pull
    head_repo = ctx.state.find_repo(p.head_repo) or repo
    env = None
    if head_repo is not repo:  # a fork: read its objects too
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(head_repo.git_dir / "objects")}
    listed = gitrepo.git(
        repo.git_dir, "rev-list", "--reverse", f"{p.base_sha}..{p.head_sha}", env=env, check=False
    )
    shas = listed.split()[:250]
    return paginate(ctx, [repos.commit_json(ctx, head_repo, sha) for sha in shas])


def get_review(ctx: Ctx) -> Response:
    """GET .../reviews/{id}: one review of this pull request (a draft only for its author)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = _pull(ctx, repo)
    v = ctx.state.reviews.get(int(ctx.params["id"]))
    hidden = v is not None and v.event == "PENDING" and v.user != ctx.identity.login
    if v is None or v.repo != repo.full_name or v.number != issue.number or hidden:
        raise not_found()
    return Response(200, shapes.review(ctx, v))


def create_review(ctx: Ctx) -> Response:
    """POST .../reviews: COMMENT and REQUEST_CHANGES are kept; APPROVE is refused."""
    repo = ctx.repo()
    issue = _pull(ctx, repo)
    body = ctx.body_dict()
    event = (body.get("event") or "PENDING").upper()
    if event == "APPROVE":
        raise _refuse(ctx, "approve", repo, issue.number)
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "write", role="read")
    if event not in ("COMMENT", "REQUEST_CHANGES", "PENDING"):
        raise ApiError(422, "Unprocessable Entity", [f"Invalid event: {event}"])
    if event == "REQUEST_CHANGES" and ctx.identity.login == issue.user:
        raise ApiError(
            422, "Unprocessable Entity", ["Can not request changes on your own pull request"]
        )
    assert issue.pull is not None
    review = Review(
        ctx.state.next_id(),
        repo.full_name,
        issue.number,
        ctx.identity.login or "ghost",
        event,
        body.get("body") or "",
        body.get("commit_id") or issue.pull.head_sha,
        review_threads.check_comments(ctx, repo, issue, list(body.get("comments") or [])),
        time.time(),
    )
    ctx.state.reviews[review.id] = review
    return Response(200, shapes.review(ctx, review))


def submit_review(ctx: Ctx) -> Response:
    """POST .../reviews/{id}/events: submitting a pending review; APPROVE is refused."""
    repo = ctx.repo()
    issue = _pull(ctx, repo)
    event = (ctx.body_dict().get("event") or "").upper()
    if event == "APPROVE":
        raise _refuse(ctx, "approve", repo, issue.number)
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "write", role="read")
    review = ctx.state.reviews.get(ctx.params["id"])
    if review is None or review.repo != repo.full_name or review.number != issue.number:
        raise not_found()
    review.event = event or "COMMENT"
    review.submitted_at = time.time()
    return Response(200, shapes.review(ctx, review))
