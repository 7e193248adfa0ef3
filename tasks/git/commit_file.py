"""Commits in a bare mirror that set files' contents, made without a work tree."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tasks.git.process import HARDENING, GitError, git, git_env

REGULAR = "100644"
EXECUTABLE = "100755"


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
    return commit_files(mirror, parent, {path: (REGULAR, content.encode())}, message, env)


def _git_bytes(args: list[str], mirror: Path, data: bytes | None = None) -> bytes:
    """`git ARGS` in the mirror with bytes in and out (blobs are not text); no token."""
    done = subprocess.run(
        ["git", *HARDENING, *args],
        cwd=mirror,
        env=git_env(None),
        input=data,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise GitError(args, done.returncode, done.stderr.decode("utf-8", "replace"))
    return done.stdout


def read_blob(mirror: Path, rev: str, path: str) -> tuple[str, bytes] | None:
    """`path` at `rev` as (mode, bytes) when it is a regular file there (mode 100644 or
    100755); None for a symlink, a submodule, a directory or no such path."""
    literal = {"GIT_LITERAL_PATHSPECS": "1"}  # a path with `*` or `:(` is only a name
    listed = git(["ls-tree", "-z", rev, "--", path], mirror, check=False, timeout=60, env=literal)
    entry = listed.stdout.split("\0")[0]
    meta, _, name = entry.partition("\t")
    parts = meta.split()
    if name != path or len(parts) != 3 or parts[0] not in (REGULAR, EXECUTABLE):
        return None
    return parts[0], _git_bytes(["cat-file", "blob", parts[2]], mirror)


def commit_files(
    mirror: Path,
    parent: str,
    files: Mapping[str, tuple[str, bytes]],
    message: str,
    env: Mapping[str, str],
) -> str:
    """A new commit on `parent` whose tree is `parent`'s with each path set to (mode, bytes),
    by the author and committer in `env`; its sha. No ref moves."""
    with tempfile.TemporaryDirectory(prefix="onloop-index-") as tmp:
        indexed = {**env, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(["read-tree", parent], mirror, env=indexed)
        for path, (mode, data) in sorted(files.items()):
            blob = _git_bytes(["hash-object", "-w", "--stdin"], mirror, data).decode().strip()
            git(
                ["update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}"],
                mirror,
                env=indexed,
            )
        tree = git(["write-tree"], mirror, env=indexed).stdout.strip()
    done = git(["commit-tree", tree, "-p", parent, "-F", "-"], mirror, env=env, input=message)
    return done.stdout.strip()


def squash(mirror: Path, base: str, tip: str, message: str, env: Mapping[str, str]) -> str:
    """One commit on `base` with `tip`'s tree: the work of `base..tip` as a single commit."""
    tree = git(["rev-parse", f"{tip}^{{tree}}"], mirror, timeout=60).stdout.strip()
    done = git(["commit-tree", tree, "-p", base, "-F", "-"], mirror, env=env, input=message)
    return done.stdout.strip()
