"""A rebase's receipt: old and new heads, the restore command, the range-diff and conflicts."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.core.markdown import fenced, inline_code
from app.github.comments import fold

BACKUP_PREFIX = "refs/onloop/backup/"
# GitHub refuses a comment body over 65536 characters
# (https://github.com/orgs/community/discussions/41331): the receipt stays within BUDGET,
# the range-diff getting what the rest leaves (at most RANGE_DIFF_CHARS).
BUDGET = 60_000
RANGE_DIFF_CHARS = 36_000
SIDE_CHARS = 800  # of each side of one conflicted hunk
MAX_HUNKS = 12  # hunks shown with both sides
MAX_NAMED = 40  # hunks named at all; the rest are counted
NAME_CHARS = 200  # of a path or a command as shown
_BACKUP = re.compile(rf"^{re.escape(BACKUP_PREFIX)}(?P<branch>.+)/(?P<job>[1-9][0-9]*)$")


def backup_ref(branch: str, job_id: int) -> str:
    """Where a rebase keeps the head it replaced: `refs/onloop/backup/<branch>/<job id>`."""
    return f"{BACKUP_PREFIX}{branch}/{int(job_id)}"


def parse_backup_ref(ref: str) -> tuple[str, int] | None:
    """(branch, job id) of a backup ref; None for any other ref."""
    m = _BACKUP.match(ref)
    return (m["branch"], int(m["job"])) if m else None


class Resolution(StrEnum):
    """How one conflicted hunk was settled, as the resolved file's text shows it."""

    BASE = "kept the base branch's side"
    PR = "kept the pull request's side"
    BOTH = "kept both sides"
    REWRITTEN = "replaced both sides with new text"
    WHOLE_FILE = "settled the whole file (git left no conflict markers in it)"
    UNRESOLVED = "not resolved"


def classify(base: str, pr: str, resolved: str) -> Resolution:
    """How a hunk was settled, judged by which side's text the resolved file still holds."""
    has_base, has_pr = base in resolved, pr in resolved  # an empty side is always there
    if has_base and has_pr:
        if not pr.strip():
            return Resolution.BASE
        return Resolution.PR if not base.strip() else Resolution.BOTH
    if has_pr:
        return Resolution.PR
    return Resolution.BASE if has_base else Resolution.REWRITTEN


@dataclass(frozen=True)
class Hunk:
    """One conflict the rebase stopped on: in `path` at `line` (1-based, in the file with its
    markers) while replaying `commit`; `base` is the new base's text, `pr` the PR commit's."""

    path: str
    line: int
    commit: str
    base: str
    pr: str
    resolution: Resolution = Resolution.UNRESOLVED


@dataclass(frozen=True)
class CheckRun:
    """A check that ran on the resolved tree."""

    command: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Receipt:
    """What a pushed rebase changed and how to undo it. `backup` is the ref holding `old`
    (None when it could not be written, `backup_note` says why); `fetch_from` is where that
    ref lives and `push_to` where the branch does ("origin" both, unless the head is in a
    fork: then the base repository's URL and the fork's)."""

    branch: str
    old: str
    new: str
    base: str
    backup: str | None = None
    backup_days: int = 30
    backup_note: str = ""
    fetch_from: str = "origin"
    push_to: str = "origin"
    range_diff: str = ""
    range_diff_error: str = ""
    hunks: Sequence[Hunk] = ()
    checks: Sequence[CheckRun] | None = None  # None: no agent resolution, so none ran


def restore_command(branch: str, old: str, new: str, remote: str = "origin") -> str:
    """The one command that puts `old` back on `branch`, only while it still holds `new`."""
    lease = shlex.quote(f"--force-with-lease={branch}:{new}")
    return f"git push {lease} {shlex.quote(remote)} {shlex.quote(f'{old}:{branch}')}"


def restore_script(receipt: Receipt) -> str:
    """The fetch of the backup (a fresh clone has no `old`) and the restore command."""
    lines = []
    if receipt.backup:
        where = receipt.fetch_from
        lines.append(f"git fetch {shlex.quote(where)} {shlex.quote(receipt.backup)}")
    lines.append(restore_command(receipt.branch, receipt.old, receipt.new, receipt.push_to))
    return "\n".join(lines)


def receipt_markdown(receipt: Receipt) -> str:
    """The receipt, as Markdown no branch name, file or range-diff text can break out of."""
    parts = [
        f"Old head {inline_code(receipt.old)}, new head {inline_code(receipt.new)} "
        f"(onto {inline_code(receipt.base)})."
    ]
    if receipt.backup:
        parts.append(
            f"The old head is kept as {inline_code(receipt.backup)} for "
            f"{receipt.backup_days} days. To put it back:"
        )
    else:
        why = f" ({receipt.backup_note})" if receipt.backup_note else ""
        parts.append(f"onloop could not keep a backup ref{why}. To put the old head back:")
    parts.append(fenced(restore_script(receipt), "sh"))
    after = []
    if receipt.hunks:
        after.append(hunks_markdown(receipt.hunks))
    if receipt.checks is not None:
        after.append(checks_markdown(receipt.checks))
    room = BUDGET - sum(len(p) + 2 for p in (*parts, *after)) - 500
    parts.append(range_diff_markdown(receipt, max(1000, min(RANGE_DIFF_CHARS, room))))
    return "\n\n".join([*parts, *after])


def range_diff_markdown(receipt: Receipt, limit: int = RANGE_DIFF_CHARS) -> str:
    """`git range-diff`, folded and fenced; shortened to `limit` characters."""
    command = f"git range-diff {receipt.base[:12]} {receipt.old[:12]} {receipt.new[:12]}"
    if receipt.range_diff_error:
        return f"No range-diff: {inline_code(receipt.range_diff_error)}"
    text = receipt.range_diff or "(no commits to compare)"
    if len(text) > limit:
        text = text[:limit] + f"\n… (shortened: {len(receipt.range_diff)} characters)"
    return fold(command, fenced(text.removesuffix("\n"), "diff"))


def hunks_markdown(hunks: Sequence[Hunk]) -> str:
    """Each conflicted hunk: where, in which commit, both sides (folded) and its resolution."""
    lines = [f"The rebase stopped on {len(hunks)} conflicted hunk(s):", ""]
    for n, hunk in enumerate(hunks[:MAX_NAMED], 1):
        where = inline_code(_short(hunk.path)) + (f" line {hunk.line}" if hunk.line else "")
        lines.append(
            f"{n}. {where}, replaying {inline_code(hunk.commit[:12])}: {hunk.resolution.value}"
        )
        if n > MAX_HUNKS:
            continue
        sides = f"<<<<<<< base\n{_cut(hunk.base)}=======\n{_cut(hunk.pr)}>>>>>>> pull request"
        lines += ["", _indent(fold(f"hunk {n}: both sides", fenced(sides))), ""]
    if len(hunks) > MAX_NAMED:
        lines.append(f"… and {len(hunks) - MAX_NAMED} more.")
    return "\n".join(lines).rstrip()


def checks_markdown(checks: Sequence[CheckRun]) -> str:
    """The checks that ran on the resolved tree, or that none is configured."""
    if not checks:
        return (
            "No checks ran after the resolution: none is configured (`checks.test` or "
            "`checks.fix` in `.github/onloop.yml`)."
        )
    ran = "\n".join(
        f"- {'✓' if c.ok else '✗'} {inline_code(_short(c.command))} (exit {c.exit_code})"
        for c in checks[:MAX_NAMED]
    )
    return f"Checks run after the resolution:\n\n{ran}"


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS] + "…"


def _cut(side: str) -> str:
    text = side if len(side) <= SIDE_CHARS else side[:SIDE_CHARS] + "\n… (shortened)\n"
    return text if not text or text.endswith("\n") else text + "\n"


def _indent(block: str) -> str:
    """A block under a numbered item (three spaces): every line, so a fence stays inside."""
    return "\n".join(f"   {line}" if line else "" for line in block.splitlines())
