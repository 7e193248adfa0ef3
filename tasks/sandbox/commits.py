"""Files and commits out of a sandbox's workspace: read without following a symlink, the
job's changes committed in one command, its new commits brought into the mirror."""

from __future__ import annotations

import dataclasses
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import ExecResult, Sandbox, SandboxError

# Inside .git: never staged by a later `git add --all` in the same workspace.
BUNDLE = ".git/onloop-out.bundle"
# Stage everything, stop when nothing is staged, else commit with the options in "$@".
NOTHING_STAGED, NOT_STAGED, NOT_BUNDLED, NOTHING_NEW = 80, 81, 82, 83
_COMMIT = (
    f"git add --all || exit {NOT_STAGED}\n"
    f"git diff --cached --quiet && exit {NOTHING_STAGED}\n"
    'exec git commit --quiet --no-verify "$@"\n'
)
# The same, then the commits since "$1" bundled for `collect_commits` (one command, not two).
_COMMIT_AND_BUNDLE = (
    f"git add --all || exit {NOT_STAGED}\n"
    f"git diff --cached --quiet && exit {NOTHING_STAGED}\n"
    'base=$1; shift\ngit commit --quiet --no-verify "$@" || exit $?\n'
    f'git bundle create --quiet /workspace/{BUNDLE} "^$base" HEAD || exit {NOT_BUNDLED}\n'
)

# A git command ("$@" after the base in "$1"; e.g. a rebase), then, when it succeeded, the
# commits since the base bundled in the same command: a sandbox command costs ~50 ms to start.
_THEN_BUNDLE = (
    'base=$1; shift\n"$@" || exit $?\n'
    f'out=$(git bundle create --quiet /workspace/{BUNDLE} "^$base" HEAD 2>&1) && exit 0\n'
    f'case $out in *"empty bundle"*) exit {NOTHING_NEW};; esac\n'
    f'printf "%s\\n" "$out" >&2; exit {NOT_BUNDLED}\n'
)


class CommitFailed(SandboxError):
    """`git add` or `git commit` failed in the sandbox; the message says which and why."""


def read_workspace_file(workspace: Path, relpath: str, dest: Path, limit: int = 2**31) -> Path:
    """Copy a file the sandbox wrote to `dest`, refusing symlinks anywhere on the way (the
    sandbox controls the workspace: it must not make the worker read a host file)."""
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        parts = [p for p in relpath.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad workspace path {relpath!r}")
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        src = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(src, "rb") as fin:
        if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
            raise ValueError(f"{relpath!r} is not a regular file")
        with open(dest, "wb") as fout:
            copied = 0
            while chunk := fin.read(1 << 20):
                copied += len(chunk)
                if copied > limit:
                    raise ValueError(f"{relpath!r} is larger than {limit} bytes")
                fout.write(chunk)
    return dest


def commit_all(
    sandbox: Sandbox,
    message: Sequence[str],
    env: dict[str, str],
    *,
    bundle_since: str | None = None,
) -> bool:
    """Commit everything changed in the workspace (`message`: git's -m options), in one
    command; False when nothing changed, CommitFailed saying what failed. `bundle_since`:
    the same command bundles the commits since that sha for `collect_commits(bundled=True)`."""
    if bundle_since is None:
        args = ["/bin/sh", "-c", _COMMIT, "sh", *message]
    else:
        args = ["/bin/sh", "-c", _COMMIT_AND_BUNDLE, "sh", bundle_since, *message]
    done = sandbox.exec(args, env=env)
    if done.exit_code == NOTHING_STAGED:
        return False
    if not done.ok:
        what = {NOT_STAGED: "stage the changes", NOT_BUNDLED: "bundle the new commit"}.get(
            done.exit_code, "commit"
        )
        raise CommitFailed(f"could not {what}: {done.output.strip()[-500:]}")
    return True


def run_then_bundle(
    sandbox: Sandbox, argv: Sequence[str], base: str, env: dict[str, str]
) -> tuple[ExecResult, bool]:
    """Run the git command `argv` and, when it succeeds, bundle the commits since `base` for
    `collect_commits(bundled=True)`, in one sandbox command. `argv`'s result, and whether the
    commits are bundled (False when it failed or left no commit since `base`)."""
    done = sandbox.exec(["/bin/sh", "-c", _THEN_BUNDLE, "sh", base, *argv], env=env)
    if done.exit_code == NOT_BUNDLED:
        raise SandboxError(f"could not bundle the job's commits: {done.stderr.strip()[-500:]}")
    if done.exit_code == NOTHING_NEW:
        return dataclasses.replace(done, exit_code=0), False
    return done, done.ok


def collect_commits(
    sandbox: Sandbox, cache: RepoCache, repo: str, base: str, ref: str, *, bundled: bool = False
) -> str | None:
    """Bring the commits made in the sandbox since `base` into the mirror as `ref` (under
    refs/onloop/), through a bundle: the worker never runs git in the workspace. The new
    tip's sha, or None when there are no new commits. Push it with `RepoCache.push`.
    `bundled`: `commit_all(bundle_since=base)` made the bundle already."""
    if not bundled:
        made = sandbox.exec(["git", "bundle", "create", f"/workspace/{BUNDLE}", f"^{base}", "HEAD"])
        if not made.ok:
            if "empty bundle" in made.stderr:
                return None
            raise SandboxError(f"could not bundle the job's commits: {made.stderr.strip()}")
    with tempfile.TemporaryDirectory(prefix="onloop-bundle-") as tmp:
        bundle = read_workspace_file(sandbox.workspace, BUNDLE, Path(tmp) / "out.bundle")
        return cache.import_bundle(repo, bundle, ref)
