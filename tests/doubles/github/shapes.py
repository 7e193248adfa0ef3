"""GitHub's JSON shapes for the double's records, with absolute URLs that point back at it."""

from __future__ import annotations

import base64
import zlib
from typing import Any

from tests.doubles.github import gitrepo
from tests.doubles.github.api import Ctx, iso
from tests.doubles.github.auth import user_role
from tests.doubles.github.model import (
    ROLES,
    Comment,
    Identity,
    Issue,
    Reaction,
    Repo,
    Review,
    User,
    role_at_least,
)


def node_id(kind: str, id_: int) -> str:
    return base64.b64encode(f"{kind}{id_}".encode()).decode()


def user(ctx: Ctx, u: User | str) -> dict[str, Any]:
    if isinstance(u, str):
        u = ctx.state.user(u)
    return {
        "login": u.login,
        "id": u.id,
        "node_id": node_id("U", u.id),
        "type": u.type,
        "site_admin": False,
        "avatar_url": ctx.web(f"/avatars/{u.login}"),
        "url": ctx.api(f"/users/{u.login}"),
        "html_url": ctx.web(f"/{u.login}"),
        "name": u.name,
        "email": u.email,
    }


def permissions(ctx: Ctx, repo: Repo, ident: Identity) -> dict[str, bool] | None:
    if ident.kind != "user" or not ident.login:
        return None
    role = user_role(ctx.state, repo, ident.login)
    return {
        "admin": role_at_least(role, "admin"),
        "maintain": role_at_least(role, "maintain"),
        "push": role_at_least(role, "write"),
        "triage": role_at_least(role, "triage"),
        "pull": role_at_least(role, "read"),
    }


def repo(ctx: Ctx, r: Repo, full: bool = True) -> dict[str, Any]:
    api = ctx.api(f"/repos/{r.full_name}")
    out: dict[str, Any] = {
        "id": r.id,
        "node_id": node_id("R", r.id),
        "name": r.name,
        "full_name": r.full_name,
        "owner": user(ctx, r.owner),
        "private": r.private,
        "visibility": "private" if r.private else "public",
        "fork": r.fork_of is not None,
        "url": api,
        "html_url": ctx.web(f"/{r.full_name}"),
        "clone_url": ctx.web(f"/{r.full_name}.git"),
        "git_url": ctx.web(f"/{r.full_name}.git"),
        "default_branch": r.default_branch,
        "archived": False,
        "disabled": False,
        "topics": list(r.topics),
        "language": r.language,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.created_at),
        "pushed_at": iso(r.created_at),
        "issues_url": api + "/issues{/number}",
        "pulls_url": api + "/pulls{/number}",
        "contents_url": api + "/contents/{+path}",
    }
    perms = permissions(ctx, r, ctx.identity)
    if perms is not None:
        out["permissions"] = perms
    if full and r.fork_of:
        out["parent"] = out["source"] = repo(ctx, ctx.state.repo(r.fork_of), full=False)
    return out


def label(ctx: Ctx, r: Repo, name: str) -> dict[str, Any]:
    return {
        "id": zlib.crc32(f"{r.id}:{name}".encode()),
        "name": name,
        "color": "ededed",
        "default": False,
        "description": None,
        "url": ctx.api(f"/repos/{r.full_name}/labels/{name}"),
    }


def issue(ctx: Ctx, r: Repo, i: Issue) -> dict[str, Any]:
    api = ctx.api(f"/repos/{r.full_name}/issues/{i.number}")
    out: dict[str, Any] = {
        "id": i.id,
        "node_id": node_id("I", i.id),
        "number": i.number,
        "title": i.title,
        "body": i.body,
        "state": i.state,
        "locked": False,
        "user": user(ctx, i.user),
        "labels": [label(ctx, r, n) for n in i.labels],
        "assignees": [],
        "assignee": None,
        "comments": len(ctx.state.comments(r.full_name, i.number)),
        "created_at": iso(i.created_at),
        "updated_at": iso(i.updated_at),
        "closed_at": iso(i.closed_at),
        "author_association": association(ctx, r, i.user),
        "url": api,
        "comments_url": api + "/comments",
        "labels_url": api + "/labels{/name}",
        "html_url": ctx.web(f"/{r.full_name}/{'pull' if i.pull else 'issues'}/{i.number}"),
        "repository_url": ctx.api(f"/repos/{r.full_name}"),
    }
    if i.pull:
        out["pull_request"] = {
            "url": ctx.api(f"/repos/{r.full_name}/pulls/{i.number}"),
            "html_url": out["html_url"],
            "merged_at": None,
        }
    return out


def association(ctx: Ctx, r: Repo, login: str) -> str:
    if login.lower() == r.owner.lower():
        return "OWNER"
    role = r.collaborators.get(login.lower())
    return "COLLABORATOR" if role and ROLES.index(role) >= ROLES.index("write") else "NONE"


def part(ctx: Ctx, r: Repo, ref: str, sha: str) -> dict[str, Any]:
    return {
        "label": f"{r.owner}:{ref}",
        "ref": ref,
        "sha": sha,
        "user": user(ctx, r.owner),
        "repo": repo(ctx, r, full=False),
    }


def refresh_pull(ctx: Ctx, r: Repo, i: Issue) -> None:
    """Read the head and base shas from git again, as GitHub does after a push."""
    assert i.pull is not None
    head_repo = ctx.state.find_repo(i.pull.head_repo) or r
    i.pull.head_sha = gitrepo.rev(head_repo.git_dir, f"refs/heads/{i.pull.head_ref}") or (
        i.pull.head_sha
    )
    i.pull.base_sha = gitrepo.rev(r.git_dir, f"refs/heads/{i.pull.base_ref}") or i.pull.base_sha


def mergeable_state(r: Repo, i: Issue, head_repo: Repo) -> str:
    """ "dirty" when the head conflicts with the base, "clean" when not, as GitHub says once
    it has computed it; "unknown" for a closed PR or a fork's head (not computed here)."""
    p = i.pull
    if p is None or i.state != "open" or head_repo is not r:
        return "unknown"
    try:  # exit status 1 on a conflict (https://git-scm.com/docs/git-merge-tree)
        gitrepo.git(r.git_dir, "merge-tree", "--write-tree", p.base_sha, p.head_sha)
    except RuntimeError:
        return "dirty"
    return "clean"


def pull(ctx: Ctx, r: Repo, i: Issue) -> dict[str, Any]:
    assert i.pull is not None
    refresh_pull(ctx, r, i)
    p = i.pull
    head_repo = ctx.state.find_repo(p.head_repo) or r
    state = mergeable_state(r, i, head_repo)
    base = issue(ctx, r, i)
    api = ctx.api(f"/repos/{r.full_name}/pulls/{i.number}")
    base.pop("pull_request", None)
    base.update(
        {
            "url": api,
            "html_url": ctx.web(f"/{r.full_name}/pull/{i.number}"),
            "issue_url": ctx.api(f"/repos/{r.full_name}/issues/{i.number}"),
            "commits_url": api + "/commits",
            "review_comments_url": api + "/comments",
            "comments_url": ctx.api(f"/repos/{r.full_name}/issues/{i.number}/comments"),
            "statuses_url": ctx.api(f"/repos/{r.full_name}/statuses/{p.head_sha}"),
            "head": part(ctx, head_repo, p.head_ref, p.head_sha),
            "base": part(ctx, r, p.base_ref, p.base_sha),
            "draft": p.draft,
            "merged": p.merged,
            "merged_at": None,
            "merge_commit_sha": None,
            "mergeable": None if state == "unknown" else state == "clean",
            "rebaseable": None,
            "mergeable_state": state,
            "maintainer_can_modify": p.maintainer_can_modify,
            "requested_reviewers": [],
            "auto_merge": None,
        }
    )
    return base


def comment(ctx: Ctx, c: Comment) -> dict[str, Any]:
    r = ctx.state.repo(c.repo)
    api = ctx.api(f"/repos/{c.repo}/issues/comments/{c.id}")
    counts: dict[str, Any] = {"url": api + "/reactions", "total_count": len(c.reactions)}
    for content in ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"):
        counts[content] = sum(1 for x in c.reactions if x.content == content)
    return {
        "id": c.id,
        "node_id": node_id("IC", c.id),
        "body": c.body,
        "user": user(ctx, c.user),
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
        "author_association": association(ctx, r, c.user),
        "url": api,
        "html_url": ctx.web(f"/{c.repo}/issues/{c.number}#issuecomment-{c.id}"),
        "issue_url": ctx.api(f"/repos/{c.repo}/issues/{c.number}"),
        "reactions": counts,
    }


def reaction(ctx: Ctx, x: Reaction) -> dict[str, Any]:
    return {
        "id": x.id,
        "node_id": node_id("RE", x.id),
        "content": x.content,
        "user": user(ctx, x.user),
        "created_at": iso(x.created_at),
    }


# A review's REST `state` for the event that made it; webhooks give it in lower case.
REVIEW_STATES = {
    "COMMENT": "COMMENTED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "APPROVE": "APPROVED",
}


def review(ctx: Ctx, v: Review) -> dict[str, Any]:
    state = REVIEW_STATES.get(v.event, "PENDING")
    return {
        "id": v.id,
        "node_id": node_id("PRR", v.id),
        "user": user(ctx, v.user),
        "body": v.body,
        "state": state,
        "commit_id": v.commit_id,
        "submitted_at": None if state == "PENDING" else iso(v.submitted_at),
        "author_association": association(ctx, ctx.state.repo(v.repo), v.user),
        "html_url": ctx.web(f"/{v.repo}/pull/{v.number}#pullrequestreview-{v.id}"),
        "pull_request_url": ctx.api(f"/repos/{v.repo}/pulls/{v.number}"),
    }
