"""Blast radius: before a push, refuse a diff that touches denied paths, is too large, adds
binaries, executables or oversized files, or reaches outside the repository (symlinks out,
submodules). `tasks.git.guard.check_diff` applies it to the net change and every commit."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.core.markdown import inline_code
from app.policy.path_rules import PathRule, compile_rules
from app.policy.repo_config import LimitsConfig, RepoConfig
from tasks.git.process import git

SYMLINK, GITLINK, EXECUTABLE = "120000", "160000", "100755"
REGULAR = ("100644", EXECUTABLE)
MODES_KNOWN = (*REGULAR, SYMLINK, GITLINK, "000000")
ZERO = "0" * 40
SHOWN = 10  # files named per rule in a message; the rest are counted

# Rule names, as the refusal comment and the audit log show them.
PATHS_DENY = "paths.deny"
MAX_FILES = "limits.max_files"
MAX_CHANGED_LINES = "limits.max_changed_lines"
MAX_FILE_BYTES = "limits.max_file_bytes"
BINARY = "binary_files"
OUTSIDE = "outside_repository"
MODES = "file_modes"
HISTORY = "history"
GUARD_TIME = "guard_time"
REPLAY = "rebase_replay"
RULES = (
    PATHS_DENY,
    MAX_FILES,
    MAX_CHANGED_LINES,
    BINARY,
    MAX_FILE_BYTES,
    OUTSIDE,
    MODES,
    HISTORY,
    REPLAY,
    GUARD_TIME,
)  # the order a refusal names them in


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


Hit = tuple[str, str]  # a path and a note about it ("" for none)


@dataclass
class Found:
    """What broke which rule, gathered over several diffs (the net one, then each commit):
    one violation per rule, each path named once, in a fixed order of rules."""

    hits: dict[str, dict[str, str]] = field(default_factory=dict)  # rule -> path -> note
    totals: dict[str, Violation] = field(default_factory=dict)  # counted rules, first kept

    def hit(self, rule: str, path: str, note: str = "") -> None:
        self.hits.setdefault(rule, {}).setdefault(path, note)

    def total(self, violation: Violation) -> None:
        self.totals.setdefault(violation.rule, violation)

    def violations(self, limits: LimitsConfig) -> list[Violation]:
        what = {
            PATHS_DENY: "changes denied paths",
            BINARY: "adds or changes binary files",
            MAX_FILE_BYTES: f"files larger than {limits.max_file_bytes} bytes",
            OUTSIDE: "reaches outside the repository",
            MODES: "makes files executable or sets modes git does not write",
            REPLAY: "commits that are not the pull request's own",
        }
        out: list[Violation] = []
        for rule in RULES:
            out += _grouped(rule, list(self.hits.get(rule, {}).items()), what.get(rule, rule))
            out += [self.totals[rule]] if rule in self.totals else []
        return out


def _grouped(rule: str, hits: list[Hit], what: str) -> list[Violation]:
    if not hits:
        return []
    # Paths come from the pushed commits (the agent's, the PR's): code spans they cannot leave.
    shown = ", ".join(
        f"{inline_code(p)} ({note})" if note else inline_code(p) for p, note in hits[:SHOWN]
    )
    more = f" and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
    return [Violation(rule, f"{what}: {shown}{more}", hits[0][0])]


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


def check_changes(
    files: Sequence[FileChange],
    config: RepoConfig,
    sizes: dict[str, int],
    links: dict[str, Link],
    *,
    found: Found | None = None,
    note: str = "",
    totals: bool = True,
    rules: Sequence[PathRule] | None = None,
) -> list[Violation]:
    """The rules over an already read diff (`sizes` by blob sha, `links` by path), added
    to `found` (with `note` on each path); `totals` False leaves out the count limits;
    `rules`: `config.paths.deny` compiled already."""
    found = found if found is not None else Found()
    rules = compile_rules(config.paths.deny) if rules is None else rules
    tag = f" {note}" if note else ""
    for change in files:
        hit = next((r.pattern for r in rules if r.matches(change.path)), None)
        if hit is not None:
            found.hit(PATHS_DENY, change.path, f"matches {inline_code(hit)}{tag}")
    limits = config.limits
    if totals and len(files) > limits.max_files:
        found.total(
            Violation(
                MAX_FILES,
                f"{len(files)} files changed{tag}, more than the {limits.max_files} allowed",
            )
        )
    lines = sum((c.added or 0) + (c.deleted or 0) for c in files)
    if totals and lines > limits.max_changed_lines:
        found.total(
            Violation(
                MAX_CHANGED_LINES,
                f"{lines} lines changed{tag}, more than the {limits.max_changed_lines} allowed",
            )
        )
    for c in (c for c in files if not c.gone):
        if c.new_mode in REGULAR and c.added is None:
            found.hit(BINARY, c.path, note)
        if c.new_mode in REGULAR and sizes.get(c.new_sha, 0) > limits.max_file_bytes:
            found.hit(MAX_FILE_BYTES, c.path, f"{sizes[c.new_sha]} bytes{tag}")
        if c.new_mode == EXECUTABLE and c.old_mode != EXECUTABLE:
            found.hit(MODES, c.path, f"made executable{tag}")
        if c.new_mode not in MODES_KNOWN:
            found.hit(MODES, c.path, f"mode {c.new_mode}{tag}")
        if c.new_mode == SYMLINK:
            _check_link(found, rules, c.path, links.get(c.path, Link("", None)), tag)
    for c in files:
        if GITLINK in (c.old_mode, c.new_mode) or c.path == ".gitmodules":
            found.hit(OUTSIDE, c.path, f"a submodule{tag}")
    return found.violations(limits)


def _check_link(found: Found, rules: Sequence[PathRule], path: str, link: Link, tag: str) -> None:
    """A symlink reaches out, or lets a denied path be read or written through another name:
    it points at or into a denied path, or sits where denied paths could appear under it."""
    if link.resolved is None:
        found.hit(OUTSIDE, path, f"a symlink to {inline_code(link.target)}{tag}")
        return
    if link.via_link or link.kind == SYMLINK:
        found.hit(
            OUTSIDE, path, f"a symlink to {inline_code(link.target)}, through another symlink{tag}"
        )
        return
    places = [path, link.resolved]
    if link.kind not in REGULAR:  # a directory (or nothing yet): paths could appear under it
        hit = next((r.pattern for r in rules for p in places if _holds(r, p)), None)
    else:
        hit = next((r.pattern for r in rules for p in places if r.matches(p)), None)
    if hit is not None:
        found.hit(
            PATHS_DENY,
            path,
            f"a symlink to {inline_code(link.target)}, reaching {inline_code(hit)}{tag}",
        )


def _holds(rule: PathRule, directory: str) -> bool:
    return directory in ("", ".") or rule.could_hold(directory)


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


def describe(violations: Sequence[Violation]) -> str:
    """A comment body naming each rule, for the person who asked for the job."""
    lines = [
        "onloop did not push this change: it breaks the repository's limits "
        "(`.github/onloop.yml`, within the organisation's defaults).",
        "",
    ]
    lines += [f"- **{v.rule}**: {v.message}" for v in violations]
    return "\n".join(lines)
