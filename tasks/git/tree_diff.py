"""A diff as the blast-radius rules read it from the bare mirror: files, blob sizes, symlinks."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tasks.git.process import git

SYMLINK, GITLINK, EXECUTABLE = "120000", "160000", "100755"
REGULAR = ("100644", EXECUTABLE)
MODES_KNOWN = (*REGULAR, SYMLINK, GITLINK, "000000")
ZERO = "0" * 40


@dataclass(frozen=True)
class FileChange:
    """One path in `git diff --raw` between base and head (renames are a delete and an add)."""

    status: str  # A, M, D or T (type change)
    path: str
    old_mode: str
    new_mode: str
    new_sha: str
    added: int | None = None  # None: git sees a binary file
    deleted: int | None = None

    @property
    def gone(self) -> bool:
        return self.status == "D"


def _fields(output: str) -> list[str]:
    parts = output.split("\0")
    return parts[:-1] if parts and parts[-1] == "" else parts


def changes(mirror: Path, base: str, head: str, timeout: float = 600.0) -> list[FileChange]:
    """Every file that differs between the trees of `base` and `head` in the bare mirror."""
    common = ["-c", "diff.external=", "diff", "--no-ext-diff", "--no-textconv", "--no-renames"]
    raw_args = [*common, "--raw", "-z", "--no-abbrev", base, head, "--"]
    raw = _fields(git(raw_args, mirror, timeout=timeout).stdout)
    numstat_args = [*common, "--numstat", "-z", base, head, "--"]
    numstat = _fields(git(numstat_args, mirror, timeout=timeout).stdout)
    counts: dict[str, tuple[int | None, int | None]] = {}
    for entry in numstat:
        added, deleted, path = entry.split("\t", 2)
        counts[path] = (
            None if added == "-" else int(added),
            None if deleted == "-" else int(deleted),
        )
    out: list[FileChange] = []
    for meta, path in zip(raw[0::2], raw[1::2], strict=True):
        old_mode, new_mode, _old_sha, new_sha, status = meta.lstrip(":").split(" ")
        plus, minus = counts.get(path, (0, 0))
        out.append(FileChange(status[0], path, old_mode, new_mode, new_sha, plus, minus))
    return out


def blob_sizes(mirror: Path, shas: Iterable[str], timeout: float = 600.0) -> dict[str, int]:
    """The size of each blob, by sha."""
    wanted = sorted({s for s in shas if s != ZERO})
    if not wanted:
        return {}
    done = git(
        ["cat-file", "--batch-check=%(objectname) %(objectsize)"],
        mirror,
        input="".join(f"{s}\n" for s in wanted),
        timeout=timeout,
    )
    sizes: dict[str, int] = {}
    for line in done.stdout.splitlines():
        name, _, size = line.partition(" ")
        if size.isdigit():
            sizes[name] = int(size)
    return sizes


def _link_target(mirror: Path, sha: str, timeout: float) -> str:
    return git(["cat-file", "blob", sha], mirror, timeout=timeout).stdout[:4096]


def escapes(link: str, target: str) -> bool:
    """Whether a symlink at `link` pointing to `target` leads outside the repository."""
    if not target or target.startswith("/") or "\0" in target:
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    return resolved == ".." or resolved.startswith("../") or resolved.startswith("/")


@dataclass(frozen=True)
class Link:
    """A symlink the diff adds or changes: where it points, and what the tree holds there."""

    target: str
    resolved: str | None  # the target as a path in the repository; None when outside
    kind: str = ""  # the tree's mode at `resolved` ("" when absent, "040000" a directory)
    via_link: bool = False  # a directory on the way to `resolved` is itself a symlink


def resolve(link: str, target: str) -> str | None:
    """The repository path a symlink at `link` to `target` names; None outside it."""
    if escapes(link, target):
        return None
    return posixpath.normpath(posixpath.join(posixpath.dirname(link), target))


def read_links(
    mirror: Path, commit: str, files: Iterable[FileChange], timeout: float = 600.0
) -> dict[str, Link]:
    """Each added or changed symlink of the diff, resolved against the tree of `commit`."""
    links: dict[str, Link] = {}
    for c in files:
        if c.gone or c.new_mode != SYMLINK:
            continue
        target = _link_target(mirror, c.new_sha, timeout)
        resolved = resolve(c.path, target)
        if resolved is None or resolved in ("", "."):
            links[c.path] = Link(target, resolved)
            continue
        parts = resolved.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        listed = git(["ls-tree", "-z", commit, "--", *prefixes], mirror, timeout=timeout).stdout
        modes = {}
        for entry in _fields(listed):
            meta, _, name = entry.partition("\t")
            modes[name] = meta.split(" ")[0]
        via = any(modes.get(p) == SYMLINK for p in prefixes[:-1])
        links[c.path] = Link(target, resolved, modes.get(resolved, ""), via)
    return links
