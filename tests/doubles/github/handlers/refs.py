"""Refs and merges made through the REST API: `POST /git/refs` (a branch at an existing
commit) and `POST /merges` (a merge commit GitHub makes and signs, authored by the token's
user, like the commits of createCommitOnBranch)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tests.doubles.github import gitrepo
from tests.doubles.github.api import ApiError, Ctx, Response
from tests.doubles.github.auth import authorize
from tests.doubles.github.gitrepo import _write_object
from tests.doubles.github.handlers.commit_on_branch import SIGNATURE
from tests.doubles.github.handlers.repos import commit_json
from tests.doubles.github.model import Repo


@dataclass(frozen=True)
class BranchMerge:
    """A merge made through POST /repos/{o}/{r}/merges (`state.branch_merges`): never a pull
    request's merge, which the double refuses (`state.merges`)."""

    repo: str
    base: str  # the branch that moved
    head: str  # what was merged into it
    sha: str
    login: str


def create_ref(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/git/refs: `ref` (refs/heads/…) at the existing commit `sha`
    (https://docs.github.com/en/rest/git/refs#create-a-reference)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "write")
    body = ctx.body_dict()
    ref, sha = str(body.get("ref", "")), str(body.get("sha", ""))
    if not ref.startswith("refs/") or ref.count("/") < 2:
        raise ApiError(422, "Reference name must start with 'refs/' and have two slashes")
    if gitrepo.rev(repo.git_dir, ref) is not None:
        raise ApiError(422, "Reference already exists")
    found = gitrepo.git(repo.git_dir, "cat-file", "-t", sha, check=False).strip()
    if found != "commit":
        raise ApiError(422, "Object does not exist")
    gitrepo.git(repo.git_dir, "update-ref", ref, sha, "0" * 40)
    return Response(201, _ref(ctx, repo, ref, sha))


def _ref(ctx: Ctx, repo: Repo, ref: str, sha: str) -> dict[str, object]:
    return {
        "ref": ref,
        "node_id": f"REF_{sha[:12]}",
        "url": ctx.api(f"/repos/{repo.full_name}/git/{ref}"),
        "object": {
            "sha": sha,
            "type": "commit",
            "url": ctx.api(f"/repos/{repo.full_name}/git/commits/{sha}"),
        },
    }


def signed_commit(ctx: Ctx, repo: Repo, tree: str, parents: list[str], message: str) -> str:
    """A commit object GitHub makes: authored by the token's user, committed by GitHub,
    carrying GitHub's signature (so `state.verified` and the push rules accept it)."""
    login = ctx.identity.login or ctx.state.app.bot_login
    user = ctx.state.user(login)
    when = f"{int(time.time())} +0000"
    signature = "\n ".join(SIGNATURE.split("\n"))
    lines = [
        f"tree {tree}",
        *(f"parent {p}" for p in parents),
        f"author {user.login} <{user.id}+{user.login}@users.noreply.github.com> {when}",
        f"committer GitHub <noreply@github.com> {when}",
        f"gpgsig {signature}",
        "",
        message.rstrip("\n") + "\n",
    ]
    sha = _write_object(repo.git_dir, "commit", "\n".join(lines).encode())
    ctx.state.verified.add(sha)
    return sha


def merge(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/merges: merge `head` (a branch or sha) into the branch `base`;
    201 with the merge commit, 204 when `base` has it already, 409 on a conflict
    (https://docs.github.com/en/rest/branches/branches#merge-a-branch)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "contents", "write")
    body = ctx.body_dict()
    base, head = str(body.get("base", "")), str(body.get("head", ""))
    base_sha = gitrepo.rev(repo.git_dir, f"refs/heads/{base}")
    if base_sha is None:
        raise ApiError(404, "Base does not exist")
    head_sha = gitrepo.rev(repo.git_dir, f"refs/heads/{head}") or gitrepo.rev(repo.git_dir, head)
    if head_sha is None:
        raise ApiError(404, "Head does not exist")
    if gitrepo.is_ancestor(repo.git_dir, head_sha, base_sha):
        return Response(204)
    try:  # exit status 1 on a conflict (https://git-scm.com/docs/git-merge-tree)
        merged = gitrepo.git(repo.git_dir, "merge-tree", "--write-tree", base_sha, head_sha)
    except RuntimeError:
        raise ApiError(409, "Merge conflict") from None
    merged = merged.split("\n")[0].strip()
    message = str(body.get("commit_message") or f"Merge {head} into {base}")
    sha = signed_commit(ctx, repo, merged, [base_sha, head_sha], message)
    gitrepo.git(repo.git_dir, "update-ref", f"refs/heads/{base}", sha, base_sha)
    login = ctx.identity.login or ctx.state.app.bot_login
    ctx.state.branch_merges.append(BranchMerge(repo.full_name, base, head, sha, login))
    return Response(201, commit_json(ctx, repo, sha))
