"""A change as text for people to read: `git diff --stat` and the patch, capped."""

from __future__ import annotations

from pathlib import Path

from tasks.git.process import git

LIMIT = 60_000  # characters kept with a job's result for its page


def patch_text(mirror: Path, base: str, head: str, limit: int = LIMIT) -> str:
    """What `head` changes over `base` in the mirror: the stat, then the patch, cut at `limit`
    characters with a line that says so (repository config cannot run a diff driver here)."""
    options = ["--no-color", "--no-ext-diff", "--no-textconv", "--no-renames"]
    stat = git(["diff", "--stat", *options, base, head], mirror, check=False, timeout=60).stdout
    patch = git(["diff", *options, base, head], mirror, check=False, timeout=60).stdout
    text = f"{stat}\n{patch}"
    if len(text) > limit:
        text = text[:limit].rsplit("\n", 1)[0] + f"\n… cut at {limit} characters\n"
    return text
