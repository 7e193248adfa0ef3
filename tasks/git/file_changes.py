"""One commit as GraphQL `createCommitOnBranch` input: its message and file changes (additions
with base64 contents, deletions), read from a mirror; what that input cannot say is refused
(https://docs.github.com/en/graphql/reference/input-objects#filechanges)."""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.git.process import HARDENING, git, git_env

PLAIN = "100644"  # the one mode createCommitOnBranch writes


class NotExpressible(Exception):
    """A commit createCommitOnBranch cannot make (a merge, a symlink, an executable bit, a
    submodule): the message says which."""


@dataclass
class FileChanges:
    headline: str
    body: str
    additions: list[dict[str, str]] = field(default_factory=list)
    deletions: list[dict[str, str]] = field(default_factory=list)

    def mutation_input(self, repo: str, branch: str, expected_head: str) -> dict[str, Any]:
        return {
            "branch": {"repositoryNameWithOwner": repo, "branchName": branch},
            "message": {"headline": self.headline, "body": self.body},
            "fileChanges": {"additions": self.additions, "deletions": self.deletions},
            "expectedHeadOid": expected_head,
        }


def _blob(mirror: Path, sha: str) -> bytes:
    cmd = ["git", *HARDENING, "cat-file", "blob", sha]
    return subprocess.run(
        cmd, cwd=mirror, env=git_env(None), capture_output=True, check=True
    ).stdout


def file_changes(mirror: Path, sha: str) -> FileChanges:
    """The changes `sha` makes over its one parent, as createCommitOnBranch takes them."""
    parents = git(["rev-list", "--parents", "-n", "1", sha], mirror).stdout.split()[1:]
    if len(parents) != 1:
        raise NotExpressible(
            f"{sha[:12]} has {len(parents)} parents; only plain commits can be made"
        )
    message = git(["log", "-1", "--format=%B", sha], mirror).stdout.strip("\n")
    headline, _, body = message.partition("\n")
    found = FileChanges(headline.strip(), body.strip("\n"))
    listed = git(
        ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", parents[0], sha], mirror
    )
    fields = listed.stdout.split("\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta:
            continue
        _old_mode, new_mode, _old, new, status = meta.lstrip(":").split()
        if status == "D":
            found.deletions.append({"path": path})
        elif new_mode != PLAIN:
            raise NotExpressible(
                f"{path} would get mode {new_mode}; only plain files can be written"
            )
        else:
            contents = base64.b64encode(_blob(mirror, new)).decode()
            found.additions.append({"path": path, "contents": contents})
    return found
