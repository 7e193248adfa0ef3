"""Review comments on changed lines: findings, and fixers' changes as ```suggestion blocks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.review.diff import ChangedLines, FileDiff, suggestion_block
from tasks.review.findings import Finding

MAX_COMMENTS = 50  # one review with hundreds of threads helps nobody (and GitHub times out)
MAX_BODY = 60_000  # GitHub refuses comment bodies over 65536 characters


@dataclass(frozen=True)
class Edit:
    """A fixer's change to `path`: lines `start`..`end` of the head become `replacement`."""

    path: str
    start: int
    end: int
    replacement: tuple[str, ...]


@dataclass(frozen=True)
class ReviewComment:
    """One inline comment on the head (RIGHT side); multi-line when `start_line` is set."""

    path: str
    line: int
    body: str
    start_line: int | None = None

    def api(self) -> dict[str, Any]:
        """The comment as GitHub's create-a-review `comments` item."""
        out: dict[str, Any] = {"path": self.path, "line": self.line, "side": "RIGHT"}
        if self.start_line is not None and self.start_line < self.line:
            out |= {"start_line": self.start_line, "start_side": "RIGHT"}
        out["body"] = self.body
        return out


@dataclass
class Built:
    comments: list[ReviewComment] = field(default_factory=list)
    suggestions: int = 0
    outside: int = 0  # findings on lines the pull request did not change: left out
    fixes_outside: int = 0  # fixer changes that reach beyond the changed lines: left out
    omitted: int = 0  # comments past MAX_COMMENTS


def edits_from(
    files: Iterable[FileDiff],
    head_lines: Callable[[str], list[str]],
    changed: ChangedLines | None = None,
) -> list[Edit]:
    """Each hunk of the fixers' `git diff --unified=0` as an edit of whole head lines.

    git joins neighbouring changes into one hunk, so a fix on a changed line can share its
    hunk with a fix on an untouched one: where a hunk deletes lines, or replaces as many as
    it writes, it is cut where `changed` lines begin and end. A pure insertion has no line
    of its own: it is widened to the line before it (or after it); both candidates are
    returned, the caller keeps one."""
    out: list[Edit] = []
    for f in files:
        if f.binary or not f.old_path or not f.new_path or f.old_path != f.new_path:
            continue
        for hunk in f.hunks:
            start, new = hunk.old_start, hunk.new_text
            if hunk.old_count > 0:
                end = start + hunk.old_count - 1
                if changed is not None and (not new or len(new) == hunk.old_count):
                    for a, b in _runs(f.path, start, end, changed):
                        part = new[a - start : b - start + 1] if new else ()
                        out.append(Edit(f.path, a, b, part))
                else:
                    out.append(Edit(f.path, start, end, new))
                continue
            lines = head_lines(f.path)
            if 1 <= start <= len(lines):  # inserted after line `start` (0: at the top)
                out.append(Edit(f.path, start, start, (lines[start - 1], *new)))
            if start + 1 <= len(lines):
                out.append(Edit(f.path, start + 1, start + 1, (*new, lines[start])))
    return out


def _runs(path: str, start: int, end: int, changed: ChangedLines) -> list[tuple[int, int]]:
    """`start`..`end` cut into runs of lines that are all changed or all untouched."""
    runs: list[tuple[int, int]] = []
    for n in range(start, end + 1):
        if runs and changed.changed(path, n) == changed.changed(path, runs[-1][1]):
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _choose(edits: Sequence[Edit], changed: ChangedLines) -> tuple[list[Edit], int]:
    """The edits that lie wholly on changed lines (one per insertion), and how many hunks
    had none that did."""
    kept: list[Edit] = []
    dropped = 0
    i = 0
    while i < len(edits):
        group = [edits[i]]
        # the two candidates of one insertion share their replacement's inserted lines
        if i + 1 < len(edits) and _same_insertion(edits[i], edits[i + 1]):
            group.append(edits[i + 1])
        i += len(group)
        fit = next((e for e in group if changed.covers(e.path, e.start, e.end)), None)
        if fit is None:
            dropped += 1
        elif not any(
            k.path == fit.path and k.end >= fit.start and k.start <= fit.end for k in kept
        ):
            kept.append(fit)
    return kept, dropped


def _same_insertion(a: Edit, b: Edit) -> bool:
    return (
        a.path == b.path
        and a.start == a.end
        and b.start == b.end == a.start + 1
        and a.replacement[1:] == b.replacement[:-1]
    )


def build_comments(
    findings: Sequence[Finding],
    edits: Sequence[Edit],
    changed: ChangedLines,
    fixer_names: Sequence[str],
    extra: Sequence[ReviewComment] = (),
) -> Built:
    """Comments for the findings and fixes on changed lines only; a finding inside a kept
    fix is told in that fix's comment, which carries the suggestion."""
    built = Built()
    kept, built.fixes_outside = _choose(edits, changed)
    used: set[Finding] = set()
    comments: list[ReviewComment] = []
    for edit in sorted(kept, key=lambda e: (e.path, e.start)):
        inside = [f for f in findings if f.path == edit.path and edit.start <= f.line <= edit.end]
        used.update(inside)
        names = ", ".join(f"`{n}`" for n in fixer_names) or "the repository's fixers"
        head = "\n".join(f"- {f.markdown()}" for f in _unique(inside))
        what = "this line" if edit.start == edit.end else "these lines"
        head = head or f"{names} would write {what} like this:"
        body = f"{head}\n\n{suggestion_block(edit.replacement)}"
        start = edit.start if edit.start < edit.end else None
        comments.append(ReviewComment(edit.path, edit.end, body, start))
        built.suggestions += 1
    by_line: dict[tuple[str, int], list[Finding]] = {}
    for f in findings:
        if f in used:
            continue
        if not changed.changed(f.path, f.line):
            built.outside += 1
            continue
        by_line.setdefault((f.path, f.line), []).append(f)
    for (path, line), found in sorted(by_line.items()):
        body = "\n".join(f"- {f.markdown()}" for f in _unique(found))
        comments.append(ReviewComment(path, line, body))
    for comment in extra:
        if changed.changed(comment.path, comment.line):
            comments.append(comment)
        else:
            built.outside += 1
    seen: set[tuple[str, int, int | None, str]] = set()
    for c in comments:
        key = (c.path, c.line, c.start_line, c.body)
        if key in seen:
            continue
        seen.add(key)
        if len(built.comments) >= MAX_COMMENTS:
            built.omitted += 1
            continue
        built.comments.append(ReviewComment(c.path, c.line, c.body[:MAX_BODY], c.start_line))
    return built


def _unique(found: Iterable[Finding]) -> list[Finding]:
    out: list[Finding] = []
    for f in found:
        if f not in out:
            out.append(f)
    return out
