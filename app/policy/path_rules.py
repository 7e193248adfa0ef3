"""`paths.deny` patterns: gitignore semantics (pathspec parses them), matched with RE2, whose
time is linear in the path, so no pattern a repository writes can stall the worker."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pathspec
import re2

MAX_PATTERNS = 100  # in one file (the organisation's and a repository's add up)
MAX_PATTERN_CHARS = 200


class PatternError(ValueError):
    """A pattern that is too long, not valid, or one too many; the message says which."""


def _re2(regex: str) -> Any:
    # Python's `re` backtracks: `*a*a*a*a*a*a*a*a*a*a*b` on 40 characters takes half a minute
    # (https://github.com/cpburnz/python-pathspec/issues/93 asks for this). RE2 never does;
    # a single RE2 regex falls back from its DFA to its NFA instead of failing when the DFA
    # runs out of memory, unlike `re2.Set` (which answers "no match" then).
    options = re2.Options()
    options.log_errors = False
    return re2.compile("(?s)" + regex, options)  # a path may hold a newline; `*` matches it


def _parsed(pattern: str) -> pathspec.RegexPattern | None:
    """pathspec's reading of one line: None for blank lines, comments and `!` lines."""
    if not pattern.strip() or pattern.lstrip().startswith(("!", "#")):
        return None
    try:
        spec = pathspec.GitIgnoreSpec.from_lines([pattern], backend="simple")
    except ValueError as exc:  # pathspec's GitIgnorePatternError
        raise PatternError(f"`{pattern}` is not a valid pattern ({exc})") from None
    (parsed,) = spec.patterns
    if parsed.include is None or parsed.regex is None:
        raise PatternError(f"`{pattern}` is not a valid pattern (git would never match it)")
    assert isinstance(parsed, pathspec.RegexPattern)
    return parsed


@dataclass(frozen=True)
class _Segments:
    """The pattern as path segments, for `could_hold`: `**` matches any number of them."""

    parts: tuple[Any, ...]  # a compiled RE2 regex for one segment, or None for `**`

    @classmethod
    def of(cls, pattern: str) -> _Segments:
        text = pattern.strip().rstrip("/")
        if "/" not in text:
            text = "**/" + text  # no slash: it matches at any depth
        parts: list[Any] = []
        for seg in text.lstrip("/").split("/"):
            if seg == "**":
                if not parts or parts[-1] is not None:
                    parts.append(None)
            elif seg:
                parts.append(_segment(seg))
        return cls(tuple(parts))

    def could_hold(self, path: str) -> bool:
        """Whether some path strictly inside the directory `path` could match: `path`'s
        segments match a proper prefix of the pattern's. O(segments x pattern segments)."""
        parts = self.parts
        reach = self._closure({0})  # pattern segments the path's segments so far can consume
        for seg in path.split("/"):
            step = set()
            for i in reach:
                if i < len(parts) and parts[i] is None:
                    step.add(i)  # `**` takes this segment and may take more
                elif i < len(parts) and parts[i].match(seg) is not None:
                    step.add(i + 1)
            reach = self._closure(step)
            if not reach:
                return False
        return any(i < len(parts) for i in reach)

    def _closure(self, reach: set[int]) -> set[int]:
        """`reach` and what follows when each `**` in the way takes no segment."""
        out = set(reach)
        for i in sorted(reach):
            while i < len(self.parts) and self.parts[i] is None:
                i += 1
                out.add(i)
        return out


def _segment(seg: str) -> Any:
    try:
        parsed = _parsed("/" + seg)
    except PatternError:
        parsed = None
    if parsed is None or parsed.regex is None:
        return _re2(".*")  # a piece pathspec reads only whole: assume it matches anything
    return _re2(parsed.regex.pattern)


@dataclass(frozen=True)
class PathRule:
    """One deny pattern, compiled: `matches` a path (or a directory above it, as git does)."""

    pattern: str
    regex: Any
    segments: _Segments

    def matches(self, path: str) -> bool:
        return self.regex.match(path) is not None

    def could_hold(self, directory: str) -> bool:
        """Whether a path under `directory` could match (a symlink there would put one)."""
        return self.matches(directory) or self.segments.could_hold(directory)


def compile_rules(patterns: Iterable[str]) -> list[PathRule]:
    """The effective `paths.deny`, one rule per pattern, so that a `!` line (from a
    repository's file) cannot re-allow what the organisation denies: it is dropped."""
    rules: list[PathRule] = []
    for pattern in patterns:
        parsed = _parsed(pattern)
        if parsed is not None and parsed.regex is not None:
            rules.append(PathRule(pattern, _re2(parsed.regex.pattern), _Segments.of(pattern)))
    return rules


def check_pattern(pattern: str) -> str:
    """The pattern, when it is at most MAX_PATTERN_CHARS long and git can read it;
    PatternError naming the limit or the problem otherwise."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"a pattern may be at most {MAX_PATTERN_CHARS} characters long, "
            f"`{pattern[:40]}…` has {len(pattern)}"
        )
    compile_rules([pattern])
    return pattern


def check_count(patterns: Sequence[str], limit: int = MAX_PATTERNS) -> list[str]:
    """The patterns, when there are at most `limit` of them; PatternError otherwise."""
    if len(patterns) > limit:
        raise PatternError(f"at most {limit} patterns are allowed, this list has {len(patterns)}")
    return list(patterns)
