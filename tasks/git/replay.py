"""A rebase may only replay a pull request's own commits onto the new base: each rebased
commit's `git patch-id --stable` is one of the PR's commits' (each used once), and a PR
commit left out is one the base already has (as `git rebase` itself leaves those out)."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from tasks.git.blast_radius import REPLAY, Found, Violation
from tasks.git.process import HARDENING, GitError, git_env

# The patch a commit makes, as `git patch-id` hashes it: no context lines (a clean rebase
# onto a base that changed the lines next to a change alters those, nothing else), white
# space ignored by patch-id itself (what `rebase -X ignore-space-change` may settle), full
# binary contents (`--binary`; without it two different binaries read the same) and modes.
# https://git-scm.com/docs/git-patch-id
LOG = [
    "-c",
    "diff.external=",
    "log",
    "--patch",
    "--unified=0",
    "--binary",
    "--full-index",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--format=commit %H",
]


def _git_bytes(args: Sequence[str], mirror: Path, timeout: float, stdin: bytes = b"") -> bytes:
    """git over bytes (file contents need not be UTF-8); a local mirror, so no token."""
    try:
        done = subprocess.run(
            ["git", *HARDENING, *args],
            cwd=mirror,
            env=git_env(None),
            input=stdin,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitError(args, -1, f"timed out after {timeout:g}s") from exc
    if done.returncode != 0:
        raise GitError(args, done.returncode, done.stderr.decode(errors="replace"))
    return done.stdout


def patch_ids(mirror: Path, revs: str, timeout: Callable[[], float]) -> list[tuple[str, str]]:
    """(commit, patch id) of each non-merge commit in `revs` that changes something."""
    log = _git_bytes([*LOG, "--no-merges", revs, "--"], mirror, timeout())
    out = _git_bytes(["patch-id", "--stable"], mirror, timeout(), stdin=log).decode()
    return [(commit, pid) for pid, commit in (line.split() for line in out.splitlines())]


def _commits(mirror: Path, revs: str, timeout: Callable[[], float]) -> list[str]:
    out = _git_bytes(["rev-list", "--no-merges", revs, "--"], mirror, timeout()).decode()
    return out.split()


def check_replay(
    mirror: Path,
    onto: str,
    old_head: str,
    new_head: str,
    found: Found,
    timeout: Callable[[], float],
) -> None:
    """Whether `onto..new_head` replays `onto..old_head` (what `git rebase onto` replays);
    what it adds or changes goes into `found` under REPLAY. Merges are the guard's."""
    theirs = patch_ids(mirror, f"{onto}..{old_head}", timeout)
    ours = patch_ids(mirror, f"{onto}..{new_head}", timeout)
    pool = Counter(pid for _, pid in theirs)
    for commit, pid in ours:
        if pool[pid] > 0:
            pool[pid] -= 1
        else:
            found.hit(REPLAY, commit[:12], "not one of the pull request's commits, or changed")
    # Empty commits (no patch id): no more of them than the pull request had.
    with_patch = {c for c, _ in ours}
    empty = [c for c in _commits(mirror, f"{onto}..{new_head}", timeout) if c not in with_patch]
    had = len(_commits(mirror, f"{onto}..{old_head}", timeout)) - len(theirs)
    for commit in empty[: max(0, len(empty) - had)]:
        found.hit(REPLAY, commit[:12], "an empty commit the pull request did not have")
    left_out = {pid for pid, n in pool.items() if n > 0}
    if left_out:
        upstream = {pid for _, pid in patch_ids(mirror, f"{old_head}..{onto}", timeout)}
        for commit, pid in theirs:
            if pid in left_out - upstream:
                found.hit(REPLAY, commit[:12], "the pull request's commit, left out")
    if found.hits.get(REPLAY):
        found.total(
            Violation(
                REPLAY,
                "a rebase pushes only the pull request's own commits, replayed onto "
                f"`{onto[:12]}`; it was built from `{old_head[:12]}`",
            )
        )
