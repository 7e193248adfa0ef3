"""Repositories, contents, branches, commits, collaborator permissions and users."""

from __future__ import annotations

import base64
from typing import Any

from tests.doubles.github import gitrepo, shapes
from tests.doubles.github.api import ApiError, Ctx, Response, not_found
from tests.doubles.github.auth import authorize, require_user, user_role
from tests.doubles.github.model import Repo


def get_repo(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "metadata", "read")
    return Response(200, shapes.repo(ctx, repo))


def _resolve_ref(repo: Repo, ref: str | None) -> str:
    sha = gitrepo.rev(repo.git_dir, ref or repo.default_branch)
    if sha is None:
        raise ApiError(404, f"No commit found for the ref {ref}")
    return sha


def _content(
    ctx: Ctx, repo: Repo, kind: str, sha: str, path: str, size: int, ref: str
) -> dict[str, Any]:
    name = path.rsplit("/", 1)[-1]
    api = ctx.api(f"/repos/{repo.full_name}/contents/{path}?ref={ref}")
    return {
        "type": "file" if kind == "blob" else "dir",
        "name": name,
        "path": path,
        "sha": sha,
        "size": size,
        "url": api,
        "git_url": ctx.api(f"/repos/{repo.full_name}/git/blobs/{sha}"),
        "html_url": ctx.web(f"/{repo.full_name}/blob/{ref}/{path}"),
        "download_url": ctx.web(f"/{repo.full_name}/raw/{ref}/{path}") if kind == "blob" else None,
        "_links": {"self": api, "html": ctx.web(f"/{repo.full_name}/blob/{ref}/{path}")},
    }


def get_contents(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/contents/{path}?ref=: a file (base64) or a directory listing."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "read")
    ref = ctx.arg("ref") or repo.default_branch
    path = ctx.params.get("path", "").strip("/")
    found = gitrepo.read_object(repo.git_dir, ref, path)
    if found is None:
        _resolve_ref(repo, ref)  # 404 "No commit found" when it is the ref that is missing
        raise not_found()
    kind, sha, data = found
    if kind == "tree":
        entries = gitrepo.list_tree(repo.git_dir, ref, path)
        return Response(200, [_content(ctx, repo, k, s, p, n, ref) for k, s, p, n in entries])
    out = _content(ctx, repo, "blob", sha, path, len(data), ref)
    out.update({"content": base64.encodebytes(data).decode(), "encoding": "base64"})
    return Response(200, out)


def get_branch(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "read")
    branch = ctx.params["branch"]
    sha = gitrepo.rev(repo.git_dir, f"refs/heads/{branch}")
    if sha is None:
        raise ApiError(404, "Branch not found")
    return Response(
        200,
        {
            "name": branch,
            "commit": commit_json(ctx, repo, sha),
            "protected": ctx.state.protections.is_protected(repo, branch),
            "_links": {
                "self": ctx.api(f"/repos/{repo.full_name}/branches/{branch}"),
                "html": ctx.web(f"/{repo.full_name}/tree/{branch}"),
            },
        },
    )


def commit_json(ctx: Ctx, repo: Repo, sha: str) -> dict[str, Any]:
    """A commit as GET /repos/{o}/{r}/commits/{sha} shows it."""
    info = gitrepo.commit_info(repo.git_dir, sha)
    api = ctx.api(f"/repos/{repo.full_name}/commits/{sha}")
    return {
        "sha": sha,
        "node_id": shapes.node_id("C", int(sha[:8], 16)),
        "url": api,
        "html_url": ctx.web(f"/{repo.full_name}/commit/{sha}"),
        "commit": {
            "message": info["message"],
            "tree": {"sha": info["tree"]},
            "author": {
                "name": info["author_name"],
                "email": info["author_email"],
                "date": info["author_date"],
            },
            "committer": {
                "name": info["committer_name"],
                "email": info["committer_email"],
                "date": info["committer_date"],
            },
            "url": ctx.api(f"/repos/{repo.full_name}/git/commits/{sha}"),
        },
        "parents": [
            {"sha": p, "url": ctx.api(f"/repos/{repo.full_name}/commits/{p}")}
            for p in info["parents"]
        ],
        "author": None,
        "committer": None,
    }


def get_commit(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "read")
    sha = gitrepo.rev(repo.git_dir, ctx.params["ref"])
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ctx.params['ref']}")
    return Response(200, commit_json(ctx, repo, sha))


def collaborator_permission(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/collaborators/{user}/permission: `permission` and `role_name`."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "metadata", "read")
    login = ctx.params["user"]
    if login.lower() not in ctx.state.users:
        raise ApiError(404, f"{login} is not a user")
    role = user_role(ctx.state, repo, login)  # public repos: everyone reads
    legacy = {"maintain": "write", "triage": "read"}.get(role or "", role) or "none"
    user = shapes.user(ctx, login)
    user["permissions"] = {
        "admin": legacy == "admin",
        "push": legacy in ("admin", "write"),
        "pull": legacy != "none",
    }
    return Response(200, {"permission": legacy, "role_name": role or "none", "user": user})


def get_authenticated_user(ctx: Ctx) -> Response:
    require_user(ctx.identity)
    return Response(200, shapes.user(ctx, ctx.identity.login or ""))


def get_user(ctx: Ctx) -> Response:
    login = ctx.params["user"]
    if login.lower() not in ctx.state.users:
        raise not_found()
    return Response(200, shapes.user(ctx, login))
