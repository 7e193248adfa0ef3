"""Conflict markers in a file git left mid-rebase: each hunk's two sides, and what became of it."""

from __future__ import annotations

from dataclasses import dataclass

# `merge.conflictStyle=merge` (onloop's rebase sets it): no `|||||||` ancestor section.
# https://git-scm.com/docs/git-merge#_how_conflicts_are_presented
OURS, SPLIT, THEIRS, ANCESTOR = "<<<<<<<", "=======", ">>>>>>>", "|||||||"


@dataclass(frozen=True)
class Conflict:
    """One hunk: `line` is where its `<<<<<<<` stands (1-based); `ours` is HEAD's side (in
    a rebase, the new base), `theirs` the side of the commit being replayed."""

    line: int
    ours: str
    theirs: str


def conflicts(text: str) -> list[Conflict]:
    """The conflicted hunks of `text`, in order; an unterminated one is left out."""
    found: list[Conflict] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if not _marker(lines[i], OURS):
            i += 1
            continue
        sides: tuple[list[str], list[str], list[str]] = ([], [], [])
        start, side, part = i, 0, 0
        i += 1
        while i < len(lines):
            line = lines[i]
            if part == 0 and _marker(line, ANCESTOR):
                side = 2  # diff3's ancestor section: kept out of both sides
            elif part == 0 and line.rstrip("\r\n") == SPLIT:
                part, side = 1, 1
            elif part == 1 and _marker(line, THEIRS):
                ours, theirs = "".join(sides[0]), "".join(sides[1])
                found.append(Conflict(start + 1, ours, theirs))
                break
            else:
                sides[side].append(line)
            i += 1
        i += 1
    return found


def has_markers(text: str) -> bool:
    """Whether `text` still holds a whole conflict (the agent left it unresolved)."""
    return bool(conflicts(text))


def _marker(line: str, mark: str) -> bool:
    body = line.rstrip("\r\n")
    return body == mark or body.startswith(mark + " ")
