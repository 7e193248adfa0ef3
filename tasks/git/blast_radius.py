"""Blast radius: before a push, refuse a diff that touches denied paths, is too large, adds
binaries or oversized files, or reaches outside the repository (symlinks out, submodules)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pathspec

from app.policy.repo_config import RepoConfig
from tasks.git.process import git

SYMLINK, GITLINK = "120000", "160000"
REGULAR = ("100644", "100755")
ZERO = "0" * 40
SHOWN = 10  # files named per rule in a message; the rest are counted

# Rule names, as the refusal comment and the audit log show them.
PATHS_DENY = "paths.deny"
MAX_FILES = "limits.max_files"
MAX_CHANGED_LINES = "limits.max_changed_lines"
MAX_FILE_BYTES = "limits.max_file_bytes"
BINARY = "binary_files"
OUTSIDE = "outside_repository"


@dataclass(frozen=True)
class Violation:
    """One broken rule; `path` is the file it is about, when it is about one."""

    rule: str
    message: str
    path: str | None = None

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


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


def changes(mirror: Path, base: str, head: str) -> list[FileChange]:
    """Every file that differs between the trees of `base` and `head` in the bare mirror."""
    common = ["-c", "diff.external=", "diff", "--no-ext-diff", "--no-textconv", "--no-renames"]
    raw = _fields(git([*common, "--raw", "-z", "--no-abbrev", base, head, "--"], mirror).stdout)
    numstat = _fields(git([*common, "--numstat", "-z", base, head, "--"], mirror).stdout)
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


def _sizes(mirror: Path, shas: Iterable[str]) -> dict[str, int]:
    wanted = sorted({s for s in shas if s != ZERO})
    if not wanted:
        return {}
    done = git(
        ["cat-file", "--batch-check=%(objectname) %(objectsize)"],
        mirror,
        input="".join(f"{s}\n" for s in wanted),
    )
    sizes: dict[str, int] = {}
    for line in done.stdout.splitlines():
        name, _, size = line.partition(" ")
        if size.isdigit():
            sizes[name] = int(size)
    return sizes


def _link_target(mirror: Path, sha: str) -> str:
    return git(["cat-file", "blob", sha], mirror).stdout[:4096]


def escapes(link: str, target: str) -> bool:
    """Whether a symlink at `link` pointing to `target` leads outside the repository."""
    if not target or target.startswith("/") or "\0" in target:
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    return resolved == ".." or resolved.startswith("../") or resolved.startswith("/")


def _deny_specs(patterns: Sequence[str]) -> list[tuple[str, pathspec.GitIgnoreSpec]]:
    """One gitignore-style spec per pattern, so a path denied by any pattern stays denied:
    a `!` pattern (from a repository's file) cannot re-allow what the organisation denies."""
    return [
        (p, pathspec.GitIgnoreSpec.from_lines([p]))
        for p in patterns
        if p.strip() and not p.lstrip().startswith(("!", "#"))
    ]


Hit = tuple[str, str]  # a path and a note about it ("" for none)


def _grouped(rule: str, hits: list[Hit], what: str) -> Violation | None:
    if not hits:
        return None
    shown = ", ".join(f"`{p}` ({note})" if note else f"`{p}`" for p, note in hits[:SHOWN])
    more = f" and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
    return Violation(rule, f"{what}: {shown}{more}", hits[0][0])


def check_changes(
    files: Sequence[FileChange], config: RepoConfig, sizes: dict[str, int], links: dict[str, str]
) -> list[Violation]:
    """The rules over an already read diff (`sizes` by blob sha, `links` by path)."""
    found: list[Violation] = []
    specs = _deny_specs(config.paths.deny)
    denied: list[Hit] = []
    for change in files:
        hit = next((p for p, spec in specs if spec.match_file(change.path)), None)
        if hit is not None:
            denied.append((change.path, f"matches `{hit}`"))
    found += [v for v in [_grouped(PATHS_DENY, denied, "changes denied paths")] if v]
    limits = config.limits
    if len(files) > limits.max_files:
        found.append(
            Violation(
                MAX_FILES,
                f"{len(files)} files changed, more than the {limits.max_files} allowed",
            )
        )
    lines = sum((c.added or 0) + (c.deleted or 0) for c in files)
    if lines > limits.max_changed_lines:
        found.append(
            Violation(
                MAX_CHANGED_LINES,
                f"{lines} lines changed, more than the {limits.max_changed_lines} allowed",
            )
        )
    kept = [c for c in files if not c.gone]
    binary: list[Hit] = [(c.path, "") for c in kept if c.new_mode in REGULAR and c.added is None]
    big: list[Hit] = [
        (c.path, f"{sizes[c.new_sha]} bytes")
        for c in kept
        if c.new_mode in REGULAR and sizes.get(c.new_sha, 0) > limits.max_file_bytes
    ]
    outside: list[Hit] = [
        (c.path, f"a symlink to `{links.get(c.path, '?')}`")
        for c in kept
        if c.new_mode == SYMLINK and escapes(c.path, links.get(c.path, ""))
    ]
    outside += [
        (c.path, "a submodule")
        for c in files
        if GITLINK in (c.old_mode, c.new_mode) or c.path == ".gitmodules"
    ]
    for rule, paths, what in (
        (BINARY, binary, "adds or changes binary files"),
        (MAX_FILE_BYTES, big, f"files larger than {limits.max_file_bytes} bytes"),
        (OUTSIDE, outside, "reaches outside the repository"),
    ):
        violation = _grouped(rule, paths, what)
        if violation is not None:
            found.append(violation)
    return found


def check_diff(mirror: Path, base: str, head: str, config: RepoConfig) -> list[Violation]:
    """Every rule the change from `base` to `head` (commits in the bare `mirror`) breaks
    under `config` (the effective one); an empty list means it may be pushed."""
    files = changes(mirror, base, head)
    kept = [c for c in files if not c.gone]
    sizes = _sizes(mirror, (c.new_sha for c in kept if c.new_mode in REGULAR))
    links = {c.path: _link_target(mirror, c.new_sha) for c in kept if c.new_mode == SYMLINK}
    return check_changes(files, config, sizes, links)


def describe(violations: Sequence[Violation]) -> str:
    """A comment body naming each rule, for the person who asked for the job."""
    lines = [
        "onloop did not push this change: it breaks the repository's limits "
        "(`.github/onloop.yml`, within the organisation's defaults).",
        "",
    ]
    lines += [f"- **{v.rule}**: {v.message}" for v in violations]
    return "\n".join(lines)
