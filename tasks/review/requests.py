"""What a review asks for: suggestion blocks to apply as GitHub would, and remarks for a person
or an agent; the suggestions applied to files byte for byte. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from app.github.threads import Thread, ThreadComment
from tasks.review.diff import suggestions_in


class Skip(StrEnum):
    """Why a suggestion is listed rather than applied."""

    OUTDATED = "outdated: the commented lines changed after the suggestion was made"
    LEFT_SIDE = "it comments on removed lines (the diff's left side), which a commit cannot keep"
    NOT_A_FILE = "its file is not a regular file at the pull request's head"
    NOT_IN_FILE = "its lines are not in the file at the pull request's head"
    OVERLAPS = "it overlaps another suggestion on the same lines; apply one of them by hand"
    SEVERAL = "its thread holds more than one suggestion block; apply the one you want by hand"
    NOT_TEXT = "its file is not UTF-8 text"


@dataclass(frozen=True)
class Suggestion:
    """Replace lines `start`..`end` of `path` (the head's numbering) with `lines`."""

    thread: Thread
    comment: ThreadComment
    path: str
    start: int
    end: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Remark:
    """Comments of a thread (or the review's own text, `thread` None) that ask in words."""

    thread: Thread | None
    comments: tuple[ThreadComment, ...]

    def quoted(self) -> str:
        """The remark as data for the agent: where it is, who said what."""
        where = "the review's own text"
        if self.thread is not None:
            t = self.thread
            lines = f"{t.start_line}-{t.line}" if t.start_line else f"{t.line}"
            if t.line is None:
                lines = f"{t.original_line} (outdated: the lines changed since)"
            where = f"{t.path}, line {lines}"
        said = "\n".join(f"@{c.author}: {c.body}" for c in self.comments)
        return f"{where}\n{said}"


@dataclass
class Requests:
    """A review's asks, sorted out."""

    suggestions: list[Suggestion] = field(default_factory=list)
    remarks: list[Remark] = field(default_factory=list)
    skipped: list[tuple[Suggestion | Thread, Skip]] = field(default_factory=list)


def _normalised(body: str) -> str:
    """Comment bodies from GitHub's web editor end lines with CRLF; suggestion blocks are
    read as the lines GitHub would commit."""
    return body.replace("\r\n", "\n")


def sort_out(threads: Iterable[Thread], bot: str, *, remarks: bool = True) -> Requests:
    """The asks in unresolved threads: for each, what people wrote since onloop last answered
    there (a thread whose last word is onloop's is settled until someone replies). A thread
    with a suggestion block gives a Suggestion; one without gives a Remark (`remarks`)."""
    found = Requests()
    for thread in threads:
        if thread.resolved:
            continue
        fresh: list[ThreadComment] = []
        for comment in thread.comments:
            fresh = [] if comment.author == bot else [*fresh, comment]
        if not fresh:
            continue
        blocks = [(c, b) for c in fresh for b in suggestions_in(_normalised(c.body))]
        if not blocks:
            if remarks:
                found.remarks.append(Remark(thread, tuple(fresh)))
            continue
        comment, lines = blocks[-1]
        end = thread.line if thread.line is not None else thread.original_line or 0
        start = thread.start_line or end
        suggestion = Suggestion(thread, comment, thread.path, start, end, tuple(lines))
        if len(blocks) > 1:
            found.skipped.append((suggestion, Skip.SEVERAL))
        elif thread.outdated or thread.line is None:
            found.skipped.append((suggestion, Skip.OUTDATED))
        elif thread.side != "RIGHT":
            found.skipped.append((suggestion, Skip.LEFT_SIDE))
        else:
            found.suggestions.append(suggestion)
    return found


def _lines(data: bytes) -> list[bytes]:
    """`data` split after each LF, as GitHub numbers lines (a lone CR or form feed is not a
    line break there)."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def replace_lines(data: bytes, start: int, end: int, replacement: Sequence[str]) -> bytes:
    """`data` with lines `start`..`end` (1-based, inclusive) replaced by `replacement`, as
    GitHub's "Commit suggestion" does; CRLF lines get CRLF replacements."""
    lines = _lines(data)
    if not 1 <= start <= end <= len(lines):
        raise ValueError(f"lines {start}-{end} are not in a file of {len(lines)} lines")
    old = lines[start - 1 : end]
    eol = b"\r\n" if all(line.endswith(b"\r\n") for line in old) else b"\n"
    new = [line.encode("utf-8") + eol for line in replacement]
    if end == len(lines) and not lines[-1].endswith(b"\n") and new:
        new[-1] = new[-1][: -len(eol)]
    return b"".join(lines[: start - 1] + new + lines[end:])


Reader = Callable[[str], bytes | None]  # a path's bytes at the head; None: not a regular file


def apply_all(
    suggestions: Sequence[Suggestion], read: Reader
) -> tuple[dict[str, bytes], list[Suggestion], list[tuple[Suggestion, Skip]]]:
    """The files with every suggestion applied that can be (changed files by path), the
    suggestions applied, and those skipped with why. Overlapping suggestions are all skipped:
    which one the reviewers meant is theirs to say."""
    by_path: dict[str, list[Suggestion]] = {}
    for s in suggestions:
        by_path.setdefault(s.path, []).append(s)
    files: dict[str, bytes] = {}
    applied: list[Suggestion] = []
    skipped: list[tuple[Suggestion, Skip]] = []
    for path, group in by_path.items():
        data = read(path)
        if data is None:
            skipped += [(s, Skip.NOT_A_FILE) for s in group]
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            skipped += [(s, Skip.NOT_TEXT) for s in group]
            continue
        count = len(_lines(data))
        fits = [s for s in group if 1 <= s.start <= s.end <= count]
        skipped += [(s, Skip.NOT_IN_FILE) for s in group if s not in fits]
        clash = _overlapping(fits)
        skipped += [(s, Skip.OVERLAPS) for s in fits if s in clash]
        for s in sorted((s for s in fits if s not in clash), key=lambda s: -s.start):
            data = replace_lines(data, s.start, s.end, s.lines)
            applied.append(s)
        if any(s.path == path for s in applied):
            files[path] = data
    applied.sort(key=lambda s: (s.path, s.start))
    return files, applied, skipped


def _overlapping(group: Sequence[Suggestion]) -> list[Suggestion]:
    ordered = sorted(group, key=lambda s: (s.start, s.end))
    clash: list[Suggestion] = []
    for i, s in enumerate(ordered):
        others = ordered[:i] + ordered[i + 1 :]
        if any(o.start <= s.end and s.start <= o.end for o in others):
            clash.append(s)
    return clash


def by_thread(items: Iterable[tuple[Suggestion | Thread, Skip]]) -> Mapping[str, Skip]:
    """Thread id → why its suggestion was skipped."""
    out: dict[str, Skip] = {}
    for item, why in items:
        out[item.thread.id if isinstance(item, Suggestion) else item.id] = why
    return out
