"""Unified diffs: which lines a pull request changed, and suggestions applied as GitHub does."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app.core.markdown import fenced

# `git diff` options that make its output the same whatever config the repository carries
# (prefixes, external diff drivers, textconv filters, renames, colour, quoted paths).
DIFF_OPTIONS = (
    "-c",
    "core.quotepath=false",
    "diff",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=0",
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_OCTAL = re.compile(rb"\\([0-7]{3}|.)")
_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\", b"a": b"\a", b"b": b"\b"}


@dataclass(frozen=True)
class Hunk:
    """One hunk: `removed` are old-side line numbers, `added` new-side ones, `new_text` the
    added lines' text in order (without newlines)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    removed: tuple[int, ...] = ()
    added: tuple[int, ...] = ()
    new_text: tuple[str, ...] = ()


@dataclass
class FileDiff:
    """A file's hunks. `path` is its path after the change (before it, for a deleted file)."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


@dataclass
class ChangedLines:
    """What a diff changed: added lines by new line number (GitHub's RIGHT side) and deleted
    lines by old line number (LEFT), per path."""

    right: dict[str, set[int]] = field(default_factory=dict)
    left: dict[str, set[int]] = field(default_factory=dict)

    def changed(self, path: str, line: int, side: str = "RIGHT") -> bool:
        lines = self.right if side == "RIGHT" else self.left
        return line in lines.get(path, set())

    def covers(self, path: str, start: int, end: int) -> bool:
        """Whether every line from `start` to `end` (RIGHT side) was added or changed."""
        lines = self.right.get(path, set())
        return start <= end and all(n in lines for n in range(start, end + 1))

    @property
    def paths(self) -> list[str]:
        """Paths that have lines on the RIGHT side (added or modified files)."""
        return sorted(p for p, lines in self.right.items() if lines)


def unquote_path(text: str) -> str:
    """A path as git prints it: C-quoted ("a/t\\303\\251st") when it holds odd bytes."""
    text = text.rstrip("\t")  # git ends names that contain a space with a tab
    if not (len(text) >= 2 and text[0] == '"' and text[-1] == '"'):
        return text

    def one(m: re.Match[bytes]) -> bytes:
        code = m.group(1)
        return bytes([int(code, 8)]) if len(code) == 3 else _ESCAPES.get(code, code)

    raw = _OCTAL.sub(one, text[1:-1].encode("utf-8", "surrogateescape"))
    return raw.decode("utf-8", "replace")


def _side_path(text: str, prefix: str) -> str | None:
    name = unquote_path(text)
    if name == "/dev/null":
        return None
    return name[len(prefix) :] if name.startswith(prefix) else name


def _git_header_paths(line: str) -> tuple[str | None, str | None]:
    """Paths from `diff --git a/X b/X` (used only when there are no ---/+++ lines: binary
    files, mode changes); unambiguous when both halves are the same path."""
    rest = line[len("diff --git ") :]
    if rest.startswith('"'):
        parts = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', rest)
        if len(parts) == 2:
            return _side_path(parts[0], "a/"), _side_path(parts[1], "b/")
    half = (len(rest) - 1) // 2
    a, b = rest[:half], rest[half + 1 :]
    if a.startswith("a/") and b.startswith("b/") and a[2:] == b[2:]:
        return a[2:], b[2:]
    return None, None


def parse_diff(text: str) -> list[FileDiff]:
    """Every file of a unified `git diff` and its hunks."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            old, new = _git_header_paths(line)
            current = FileDiff(old, new)
            files.append(current)
        elif current is None:
            continue
        elif line.startswith("--- "):
            current.old_path = _side_path(line[4:], "a/")
        elif line.startswith("+++ "):
            current.new_path = _side_path(line[4:], "b/")
        elif line.startswith("deleted file mode"):
            current.new_path = None
        elif line.startswith("new file mode"):
            current.old_path = None
        elif line.startswith("Binary files ") or line.startswith("GIT binary patch"):
            current.binary = True
        elif (m := _HUNK.match(line)) is not None:
            hunk, i = _read_hunk(m, lines, i)
            current.hunks.append(hunk)
    return files


def _read_hunk(m: re.Match[str], lines: list[str], i: int) -> tuple[Hunk, int]:
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_count = int(m.group(2)) if m.group(2) is not None else 1
    new_count = int(m.group(4)) if m.group(4) is not None else 1
    old_left, new_left = old_count, new_count
    old_no, new_no = old_start, new_start
    removed: list[int] = []
    added: list[int] = []
    text: list[str] = []
    while (old_left > 0 or new_left > 0) and i < len(lines):
        line = lines[i]
        i += 1
        tag, body = line[:1], line[1:]
        if tag == "+":
            added.append(new_no)
            text.append(body)
            new_no += 1
            new_left -= 1
        elif tag == "-":
            removed.append(old_no)
            old_no += 1
            old_left -= 1
        elif tag == " " or line == "":
            old_no, new_no = old_no + 1, new_no + 1
            old_left, new_left = old_left - 1, new_left - 1
        # "\ No newline at end of file" belongs to the line before it
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    hunk = Hunk(
        old_start, old_count, new_start, new_count, tuple(removed), tuple(added), tuple(text)
    )
    return hunk, i


def changed_lines(files: Iterable[FileDiff]) -> ChangedLines:
    """The added (RIGHT) and deleted (LEFT) lines of every text file in the diff."""
    out = ChangedLines()
    for f in files:
        if f.binary:
            continue
        for hunk in f.hunks:
            if hunk.added and f.new_path:
                out.right.setdefault(f.new_path, set()).update(hunk.added)
            if hunk.removed and f.old_path:
                out.left.setdefault(f.old_path, set()).update(hunk.removed)
    return out


# --- suggestions ---------------------------------------------------------------------------


def suggestion_block(lines: Sequence[str]) -> str:
    """A ```suggestion block whose lines replace the commented lines (none: delete them).
    The fence is longer than any run of backticks inside, as CommonMark allows."""
    if not lines:
        return "```suggestion\n```"
    return fenced("\n".join(lines), "suggestion")


_BLOCK = re.compile(r"^(`{3,})suggestion[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)


def suggestions_in(body: str) -> list[list[str]]:
    """The content of each suggestion block in a comment body, as lines."""
    return [m.group(2)[:-1].split("\n") if m.group(2) else [] for m in _BLOCK.finditer(body)]


def apply_suggestion(text: str, start: int, end: int, replacement: Sequence[str]) -> str:
    """`text` with lines `start`..`end` (1-based, inclusive) replaced by `replacement`, which
    is what GitHub's "Commit suggestion" does with a suggestion on those lines."""
    lines = text.splitlines(keepends=True)
    if not 1 <= start <= end <= len(lines):
        raise ValueError(f"lines {start}-{end} are not in a file of {len(lines)} lines")
    new = [line + "\n" for line in replacement]
    if end == len(lines) and not lines[-1].endswith("\n") and new:
        new[-1] = new[-1][:-1]
    return "".join(lines[: start - 1] + new + lines[end:])


def apply_suggestions(text: str, edits: Iterable[tuple[int, int, Sequence[str]]]) -> str:
    """Apply several suggestions to one file (as a batch commit does); they must not overlap."""
    ordered = sorted(edits, key=lambda e: e[0], reverse=True)
    for later, earlier in itertools.pairwise(ordered):
        if earlier[1] >= later[0]:
            raise ValueError(f"suggestions on lines {earlier[:2]} and {later[:2]} overlap")
    for start, end, replacement in ordered:
        text = apply_suggestion(text, start, end, replacement)
    return text
