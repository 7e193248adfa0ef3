"""The guard before every push: the blast-radius rules over the net change and over each
commit in `base..head` (a file added in one commit and removed in the next is still pushed
into history), a history that only adds commits on `base`, all within a time box."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from app.policy.path_rules import PathRule, compile_rules
from app.policy.repo_config import RepoConfig
from tasks.git.blast_radius import (
    GUARD_TIME,
    HISTORY,
    REGULAR,
    Found,
    Violation,
    blob_sizes,
    changes,
    check_changes,
    read_links,
)
from tasks.git.process import GitError, git
from tasks.git.replay import check_replay

GUARD_SECONDS = 120.0  # the whole check; past it the push is refused, the worker goes on


class OutOfTime(Exception):
    """The guard's time box ran out."""


class Deadline:
    """Seconds left of the time box; `left()` raises OutOfTime once there are none."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self.end = clock() + seconds

    def left(self) -> float:
        remaining = self.end - self.clock()
        if remaining <= 0:
            raise OutOfTime()
        return remaining


def commits(mirror: Path, base: str, head: str, timeout: float) -> list[list[str]]:
    """Each commit in `base..head`, oldest first, as [sha, *parents]."""
    args = ["rev-list", "--reverse", "--topo-order", "--parents", f"{base}..{head}", "--"]
    return [line.split() for line in git(args, mirror, timeout=timeout).stdout.splitlines()]


def _inspect(
    mirror: Path,
    old: str,
    new: str,
    config: RepoConfig,
    found: Found,
    deadline: Deadline,
    *,
    note: str,
    totals: bool,
    rules: Sequence[PathRule],
) -> None:
    files = changes(mirror, old, new, deadline.left())
    kept = [c for c in files if not c.gone]
    sizes = blob_sizes(mirror, (c.new_sha for c in kept if c.new_mode in REGULAR), deadline.left())
    links = read_links(mirror, new, kept, deadline.left())
    deadline.left()
    check_changes(files, config, sizes, links, found=found, note=note, totals=totals, rules=rules)


def _history(
    mirror: Path, base: str, head: str, found: Found, deadline: Deadline
) -> list[tuple[str, str]]:
    """The commits to check one by one, each with its parent; a merge or a head not built on
    `base` is refused (onloop pushes a line of commits on top of what the branch had)."""
    ancestor = git(
        ["merge-base", "--is-ancestor", base, head], mirror, check=False, timeout=deadline.left()
    )
    if ancestor.returncode != 0:
        found.total(
            Violation(HISTORY, f"`{head[:12]}` is not built on `{base[:12]}`, so it drops commits")
        )
    listed = commits(mirror, base, head, deadline.left())
    merges = [c[0] for c in listed if len(c) != 2]
    if merges:
        found.total(
            Violation(HISTORY, f"merge commits are not pushed: `{merges[0][:12]}`", merges[0])
        )
    return [(c[0], c[1]) for c in listed if len(c) == 2]


def check_diff(
    mirror: Path,
    base: str,
    head: str,
    config: RepoConfig,
    *,
    seconds: float = GUARD_SECONDS,
    replay_of: str | None = None,
) -> list[Violation]:
    """Every rule the push of `head` over `base` (commits in the bare `mirror`) breaks under
    `config` (the effective one), in the net diff or in any one commit; an empty list means
    it may be pushed. Past `seconds`: a refusal, never a stalled worker.

    `replay_of`: `head` is a rebase of that commit onto `base`, so it may hold only those
    commits replayed (`tasks.git.replay`); the file and line counts are then left out, as
    they measure the pull request's own size, not onloop's change."""
    found, deadline = Found(), Deadline(seconds)
    totals = replay_of is None
    try:
        # The replay check reads other commits than the rest (and adds only REPLAY hits, so
        # the order of what is found stays the same): on a thread of its own, beside them.
        with ThreadPoolExecutor(1, thread_name_prefix="guard-replay") as aside:
            replay = (
                aside.submit(
                    contextvars.copy_context().run,  # the job's trace and log context
                    check_replay,
                    mirror,
                    base,
                    replay_of,
                    head,
                    found,
                    deadline.left,
                )
                if replay_of is not None
                else None
            )
            rules = compile_rules(config.paths.deny)
            inspect = partial(_inspect, mirror, config=config, found=found, deadline=deadline)
            inspect(base, head, note="", totals=totals, rules=rules)
            for sha, parent in _history(mirror, base, head, found, deadline):
                if (sha, parent) == (head, base):
                    continue  # the one commit on `base`: its diff is the net one, just checked
                inspect(parent, sha, note=f"in commit {sha[:12]}", totals=totals, rules=rules)
            if replay is not None:
                replay.result()
    except OutOfTime:
        found.total(_late(seconds))
    except GitError as exc:
        if exc.returncode != -1:  # -1: git's own timeout, the time box
            raise
        found.total(_late(seconds))
    return found.violations(config.limits)


def _late(seconds: float) -> Violation:
    return Violation(
        GUARD_TIME,
        f"checking the commits took longer than {seconds:g} seconds, so nothing was pushed; "
        "a smaller change (fewer commits and files) can be checked",
    )
