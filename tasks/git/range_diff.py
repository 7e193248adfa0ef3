"""`git range-diff` of a rebase: the PR's commits before and after, read from the mirror."""

from __future__ import annotations

from pathlib import Path

from tasks.git.process import GitError, git

# Nothing the repository says may run while diffing its commits: no external diff, no
# textconv filter (https://git-scm.com/docs/git-range-diff takes git-diff's options).
OPTIONS = ["--no-color", "--no-ext-diff", "--no-textconv", "--no-notes"]
MAX_CHARS = 200_000  # what is kept of the output; a comment holds 65536 characters at most


def range_diff(mirror: Path, base: str, old: str, new: str, *, timeout: float = 60.0) -> str:
    """`git range-diff base old new` (= `base..old` against `base..new`): how each of the
    PR's commits changed in the rebase onto `base`. Raises GitError (also on a timeout)."""
    for sha in (base, old, new):
        if not sha or sha.startswith("-"):
            raise GitError(["range-diff"], 2, f"not a revision: {sha!r}")
    done = git(
        ["-c", "diff.external=", "range-diff", *OPTIONS, base, old, new],
        mirror,
        timeout=timeout,
    )
    return done.stdout[:MAX_CHARS]


def describe_failure(exc: GitError) -> str:
    """One line saying why there is no range-diff (git's own words, shortened)."""
    said = " ".join(str(exc).split())
    return said[:300]
