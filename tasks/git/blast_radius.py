"""Blast radius: before a push, refuse a diff that touches denied paths, is too large, adds
binaries, executables or oversized files, or reaches outside the repository (symlinks out,
submodules). `tasks.git.guard.check_diff` applies it to the net change and every commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.core.markdown import inline_code
from app.policy.path_rules import PathRule, compile_rules
from app.policy.repo_config import LimitsConfig, RepoConfig
from tasks.git.tree_diff import (
    EXECUTABLE,
    GITLINK,
    MODES_KNOWN,
    REGULAR,
    SYMLINK,
    FileChange,
    Link,
    blob_sizes,
    changes,
    escapes,
    read_links,
)

# Reading the diff is tasks.git.tree_diff's; guard.py and the tests import these from here.
__all__ = ["REGULAR", "blob_sizes", "changes", "escapes", "read_links"]
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


def describe(violations: Sequence[Violation]) -> str:
    """A comment body naming each rule, for the person who asked for the job."""
    lines = [
        "onloop did not push this change: it breaks the repository's limits "
        "(`.github/onloop.yml`, within the organisation's defaults).",
        "",
    ]
    lines += [f"- **{v.rule}**: {v.message}" for v in violations]
    return "\n".join(lines)
