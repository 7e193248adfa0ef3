"""A pull request's diff as GitHub shows it (merge base to head): its files, and review comments
checked against its hunks as GitHub checks them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.doubles.github import gitrepo, shapes
from tests.doubles.github.api import ApiError, Ctx, Response, paginate
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Issue, Repo

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# GitHub's words when a review comment is not on the diff (one 422 for the whole review):
# https://github.com/parkerbxyz/suggest-changes/issues/28
NOT_IN_DIFF = (
    "Pull request review thread line must be part of the diff and Pull request review "
    "thread diff hunk can't be blank"
)
START_NOT_BEFORE = "Pull request review thread start line must precede the end line."
START_OTHER_HUNK = (
    "Pull request review thread start line must be part of the same hunk as the line."
)


@dataclass
class FilePatch:
    old_path: str | None
    new_path: str | None
    patch_lines: list[str] = field(default_factory=list)
    # (old_start, old_end, new_start, new_end) per hunk, ends inclusive
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)
    additions: int = 0
    deletions: int = 0

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def status(self) -> str:
        return (
            "added" if self.old_path is None else "removed" if self.new_path is None else "modified"
        )


def pull_diff(ctx: Ctx, repo: Repo, issue: Issue) -> str:
    """`git diff` from the merge base of base and head to the head, 3 lines of context."""
    assert issue.pull is not None
    shapes.refresh_pull(ctx, repo, issue)
    p = issue.pull
    head_repo = ctx.state.find_repo(p.head_repo) or repo
    env = None
    if head_repo is not repo:  # a fork: read its objects too
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(head_repo.git_dir / "objects")}
    found = gitrepo.git(repo.git_dir, "merge-base", p.base_sha, p.head_sha, env=env, check=False)
    base = found.strip() or p.base_sha  # unrelated histories: against the base itself
    args = ("diff", "--no-color", "--no-renames", "--unified=3", base, p.head_sha)
    return gitrepo.git(repo.git_dir, *args, env=env)


def _name(text: str, prefix: str) -> str | None:
    text = text.rstrip("\t")
    return None if text == "/dev/null" else text.removeprefix(prefix)


def split(diff: str) -> list[FilePatch]:
    files: list[FilePatch] = []
    current: FilePatch | None = None
    in_hunk = False
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            current, in_hunk = FilePatch(None, None), False
            files.append(current)
            half = line[len("diff --git ") :]
            current.old_path = current.new_path = half[: len(half) // 2].removeprefix("a/")
        elif current is None:
            continue
        elif not in_hunk and line.startswith("--- "):
            current.old_path = _name(line[4:], "a/")
        elif not in_hunk and line.startswith("+++ "):
            current.new_path = _name(line[4:], "b/")
        elif (m := _HUNK.match(line)) is not None:
            in_hunk = True
            a, b = int(m.group(1)), int(m.group(2) or 1)
            c, d = int(m.group(3)), int(m.group(4) or 1)
            current.hunks.append((a, a + b - 1, c, c + d - 1))
            current.patch_lines.append(line)
        elif in_hunk:
            current.patch_lines.append(line)
            current.additions += line.startswith("+")
            current.deletions += line.startswith("-")
    for f in files:
        while f.patch_lines and f.patch_lines[-1] == "":
            f.patch_lines.pop()
    return files


def _hunk_of(f: FilePatch, line: int, side: str) -> int | None:
    for i, (a, b, c, d) in enumerate(f.hunks):
        lo, hi = (c, d) if side == "RIGHT" else (a, b)
        if lo <= line <= hi:
            return i
    return None


def locate_line(f: FilePatch, line: int, side: str) -> tuple[int, str] | None:
    """(position, diff_hunk) of `line` in the file's patch: the position counts the lines below
    its first @@ header, the hunk runs from its header down to the line, as GitHub gives them
    (https://docs.github.com/en/rest/pulls/comments#create-a-review-comment-for-a-pull-request)."""
    old = new = 0
    header = 0
    for index, text in enumerate(f.patch_lines):
        if (m := _HUNK.match(text)) is not None:
            old, new, header = int(m.group(1)), int(m.group(3)), index
            continue
        kind = text[:1]
        if kind == "\\":  # "\ No newline at end of file"
            continue
        here = (new if kind != "-" else None) if side == "RIGHT" else (old if kind != "+" else None)
        if here == line:
            return index, "\n".join(f.patch_lines[header : index + 1])
        old += kind != "+"
        new += kind != "-"
    return None


def check_comments(ctx: Ctx, repo: Repo, issue: Issue, comments: list[Any]) -> list[dict[str, Any]]:
    """The review's comments with ids, or the 422 GitHub answers for the whole review."""
    files = {f.path: f for f in split(pull_diff(ctx, repo, issue))}
    out = []
    for raw in comments:
        if not isinstance(raw, dict) or not raw.get("path") or not raw.get("body"):
            raise ApiError(422, "Unprocessable Entity", ["comments need a path and a body"])
        f = files.get(raw["path"])
        if f is None:
            raise ApiError(422, "Unprocessable Entity", ["Path could not be resolved"])
        item = {k: raw.get(k) for k in ("path", "body", "position")}
        if raw.get("line") is not None:
            side = str(raw.get("side") or "RIGHT")
            line = int(raw["line"])
            hunk = _hunk_of(f, line, side)
            if hunk is None:
                raise ApiError(422, "Unprocessable Entity", [NOT_IN_DIFF])
            item |= {"line": line, "side": side, "start_line": None, "start_side": None}
            position, hunk_text = locate_line(f, line, side) or (None, "")
            item |= {"position": position, "original_position": position, "diff_hunk": hunk_text}
            if raw.get("start_line") is not None:
                start, start_side = int(raw["start_line"]), str(raw.get("start_side") or side)
                if start >= line and start_side == side:
                    raise ApiError(422, "Unprocessable Entity", [START_NOT_BEFORE])
                if _hunk_of(f, start, start_side) != hunk:
                    raise ApiError(422, "Unprocessable Entity", [START_OTHER_HUNK])
                item |= {"start_line": start, "start_side": start_side}
        elif raw.get("position") is None:
            raise ApiError(422, "Unprocessable Entity", [NOT_IN_DIFF])
        item["id"] = ctx.state.next_id()
        out.append(item)
    return out


def list_files(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/pulls/{n}/files"""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "pull_requests", "read")
    issue = _pull(ctx, repo)
    assert issue.pull is not None
    head = issue.pull.head_sha
    items = [
        {
            "sha": head,
            "filename": f.path,
            "status": f.status,
            "additions": f.additions,
            "deletions": f.deletions,
            "changes": f.additions + f.deletions,
            "patch": "\n".join(f.patch_lines),
            "blob_url": ctx.web(f"/{repo.full_name}/blob/{head}/{f.path}"),
            "raw_url": ctx.web(f"/{repo.full_name}/raw/{head}/{f.path}"),
            "contents_url": ctx.api(f"/repos/{repo.full_name}/contents/{f.path}?ref={head}"),
        }
        for f in split(pull_diff(ctx, repo, issue))
    ]
    return paginate(ctx, items)


def _pull(ctx: Ctx, repo: Repo) -> Issue:
    from tests.doubles.github.handlers.pulls import _pull as pull

    return pull(ctx, repo)
