"""Git references through the REST API: matching refs by prefix, and deleting one."""

from __future__ import annotations

from typing import Any

from tests.doubles.github import gitrepo
from tests.doubles.github.api import ApiError, Ctx, Response, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Repo


def _ref(ctx: Ctx, repo: Repo, name: str, sha: str) -> dict[str, Any]:
    """A git reference as GitHub shows one (an annotated tag would say "tag"; the double's
    refs all point at commits)."""
    short = name.removeprefix("refs/")
    return {
        "ref": name,
        "node_id": f"REF_{abs(hash((repo.full_name, name))):x}",
        "url": ctx.api(f"/repos/{repo.full_name}/git/refs/{short}"),
        "object": {
            "sha": sha,
            "type": "commit",
            "url": ctx.api(f"/repos/{repo.full_name}/git/commits/{sha}"),
        },
    }


def matching_refs(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/git/matching-refs/{ref}: every ref whose name (after `refs/`)
    starts with `ref`; an empty list when none does
    (https://docs.github.com/en/rest/git/refs#list-matching-references)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "read")
    prefix = "refs/" + ctx.params["ref"]
    refs = gitrepo.refs(repo.git_dir)
    found = [_ref(ctx, repo, n, sha) for n, sha in sorted(refs.items()) if n.startswith(prefix)]
    return paginate(ctx, found)


def delete_ref(ctx: Ctx) -> Response:
    """DELETE /repos/{o}/{r}/git/refs/{ref}: 204, or 422 "Reference does not exist"
    (https://docs.github.com/en/rest/git/refs#delete-a-reference). Branches go through
    protection like a push would; the double refuses protected ones."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "write")
    name = "refs/" + ctx.params["ref"]
    if name not in gitrepo.refs(repo.git_dir):
        raise ApiError(422, "Reference does not exist")
    branch = name.removeprefix("refs/heads/")
    if name.startswith("refs/heads/") and ctx.state.protections.is_protected(repo, branch):
        raise ApiError(422, "Cannot delete a protected branch")
    gitrepo.git(repo.git_dir, "update-ref", "-d", name)
    return Response(204, None)
