"""One commit in a bare mirror that sets one file's content, made without a work tree."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from tasks.git.process import git

REGULAR = "100644"


def read_file(mirror: Path, rev: str, path: str) -> str | None:
    """`path` at `rev` in the mirror as text; None when it has no such file."""
    done = git(["cat-file", "-e", f"{rev}:{path}"], mirror, check=False, timeout=60)
    if done.returncode != 0:
        return None
    return git(["cat-file", "blob", f"{rev}:{path}"], mirror, timeout=60).stdout


def commit_file(
    mirror: Path, parent: str, path: str, content: str, message: str, env: Mapping[str, str]
) -> str:
    """A new commit on `parent` whose tree is `parent`'s with `path` set to `content` (a
    regular file), by the author and committer in `env`; its sha. Nothing else changes, and
    no ref moves: the caller pushes the sha."""
    blob = git(["hash-object", "-w", "--stdin"], mirror, input=content).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="onloop-index-") as tmp:
        indexed = {**env, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", parent], mirror, env=indexed)
        git(
            ["update-index", "--add", "--cacheinfo", f"{REGULAR},{blob},{path}"],
            mirror,
            env=indexed,
        )
        tree = git(["write-tree"], mirror, env=indexed).stdout.strip()
    done = git(["commit-tree", tree, "-p", parent, "-F", "-"], mirror, env=env, input=message)
    return done.stdout.strip()
