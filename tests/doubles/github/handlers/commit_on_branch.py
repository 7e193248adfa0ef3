"""GraphQL `createCommitOnBranch`: a commit GitHub makes and signs itself (Verified), authored
by the token's user, refused as STALE_DATA when the branch no longer has `expectedHeadOid`
(https://docs.github.com/en/graphql/reference/mutations#createcommitonbranch); graphql.py
dispatches to it."""

from __future__ import annotations

import base64
import os
import tempfile
import time
from typing import Any

from tests.doubles.github import gitrepo
from tests.doubles.github.api import ApiError, Ctx, Response
from tests.doubles.github.auth import authorize
from tests.doubles.github.gitrepo import _write_object

# What the double signs with: any `gpgsig` header passes its pre-receive check.
SIGNATURE = (
    "-----BEGIN PGP SIGNATURE-----\n\nwsBcBAABCAAQBQJdouble-web-flow\n-----END PGP SIGNATURE-----"
)


def _error(kind: str, message: str) -> Response:
    return Response(
        200,
        {
            "data": {"createCommitOnBranch": None},
            "errors": [{"type": kind, "path": ["createCommitOnBranch"], "message": message}],
        },
    )


def create_commit_on_branch(ctx: Ctx, given: dict[str, Any]) -> Response:
    """One commit on `branch` from the file changes, with the token's user as its author."""
    branch = given.get("branch") or {}
    repo = ctx.state.find_repo(str(branch.get("repositoryNameWithOwner", "")))
    if repo is None:
        return _error("NOT_FOUND", "Could not resolve to a Repository.")
    authorize(ctx.state, ctx.identity, repo, "contents", "write")
    if (
        ctx.identity.kind != "user"
    ):  # an installation's commits are signed too, but onloop's must be the person's
        raise ApiError(403, "createCommitOnBranch: the double expects a user token")
    name = str(branch.get("branchName", "")).removeprefix("refs/heads/")
    head = gitrepo.rev(repo.git_dir, f"refs/heads/{name}")
    if head is None:
        return _error("NOT_FOUND", f'A ref named "refs/heads/{name}" does not exist.')
    expected = str(given.get("expectedHeadOid", ""))
    if expected != head:
        return _error(
            "STALE_DATA",
            f'Expected branch to point to "{expected}" but it did not. Pull and try again.',
        )
    changes = given.get("fileChanges") or {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        gitrepo.git(repo.git_dir, "read-tree", head, env=env)
        entries = [f"0 {'0' * 40}\t{gone['path']}" for gone in changes.get("deletions") or []]
        for added in changes.get("additions") or []:
            blob = _write_object(repo.git_dir, "blob", base64.b64decode(added["contents"]))
            entries.append(f"100644 {blob}\t{added['path']}")
        if entries:
            listing = ("\n".join(entries) + "\n").encode()
            gitrepo.git(repo.git_dir, "update-index", "--index-info", input=listing, env=env)
        tree = gitrepo.git(repo.git_dir, "write-tree", env=env).strip()
    user = ctx.state.user(ctx.identity.login or "")
    message = given.get("message") or {}
    text = str(message.get("headline", "")) + (
        f"\n\n{message['body']}" if message.get("body") else ""
    )
    when = f"{int(time.time())} +0000"
    signature = "\n ".join(SIGNATURE.split("\n"))
    lines = [
        f"tree {tree}",
        f"parent {head}",
        f"author {user.login} <{user.id}+{user.login}@users.noreply.github.com> {when}",
        f"committer GitHub <noreply@github.com> {when}",
        f"gpgsig {signature}",
        "",
        text.rstrip("\n") + "\n",
    ]
    sha = _write_object(repo.git_dir, "commit", "\n".join(lines).encode())
    gitrepo.git(repo.git_dir, "update-ref", f"refs/heads/{name}", sha, head)
    ctx.state.verified.add(sha)
    url = f"{ctx.base_url}/{repo.full_name}/commit/{sha}"
    return Response(200, {"data": {"createCommitOnBranch": {"commit": {"oid": sha, "url": url}}}})
