"""Recognisers for test and lint tools' output: each picks the lines that say what failed."""

from __future__ import annotations

import re
from collections.abc import Callable

Parser = Callable[[list[str]], list[int]]  # the step's output lines -> indices worth keeping


def _matching(lines: list[str], *patterns: re.Pattern[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if any(p.search(line) for p in patterns)]


def _block(lines: list[str], start: int, stop: Callable[[str], bool]) -> list[int]:
    """`start` and the lines after it until `stop(line)` is true (that line excluded)."""
    end = start + 1
    while end < len(lines) and not stop(lines[end]):
        end += 1
    return list(range(start, end))


# pytest: https://docs.pytest.org/en/stable/how-to/output.html
_PYTEST_SECTION = re.compile(r"^=+ (FAILURES|ERRORS|short test summary info) =+$")
_PYTEST_HEAD = re.compile(r"^_{3,} .+ _{3,}$")
_PYTEST_KEEP = re.compile(
    r"^E {2,}\S|^E$|^>\s|^[\w./\\-]+\.py:\d+:( in \S+| [A-Z][\w.]*)?$|^(FAILED|ERROR) \S"
    r"|^!{3,} .* !{3,}$"
)
_PYTEST_TOTAL = re.compile(
    r"^=*\s*\d+ (failed|passed|errors?|skipped)\b.* in [\d.]+s( \(.*\))?\s*=*$"
)


def pytest(lines: list[str]) -> list[int]:
    """Test headers, `>` and `E` lines, locations, the short summary and the totals."""
    if not any(_PYTEST_SECTION.match(line) for line in lines):
        return []
    keep = _matching(lines, _PYTEST_HEAD, _PYTEST_KEEP, _PYTEST_TOTAL)
    # a traceback entry `path.py:9: in <module>` is followed by its source line
    after = [i + 1 for i in keep if ": in " in lines[i] and i + 1 < len(lines)]
    return sorted(set(keep) | {i for i in after if lines[i].startswith("    ")})


# ruff's `path:line:col: CODE msg` (concise, and the full format before 0.12) or the newer
# full format `CODE msg` then ` --> path:line:col` (https://docs.astral.sh/ruff/linter/).
# `ruff format --check` says `Would reformat: path` (before 0.9) or `unformatted: ...` blocks.
_RUFF_CODE = r"([A-Z]{1,4}\d{2,4}|SyntaxError|invalid-syntax|unformatted)"
_RUFF_CONCISE = re.compile(r"^[^\s:][^:]*:\d+:\d+: " + _RUFF_CODE + r"\b")
_RUFF_HEAD = re.compile("^" + _RUFF_CODE + r"\b(?: \[\*\])?:? \S")
_RUFF_ARROW = re.compile(r"^\s*--> \S+:\d+:\d+\s*$")
_RUFF_KEEP = re.compile(
    r"^Found \d+ errors?|^\[\*\] \d+ fixable|^No fixes available|^Would reformat: "
    r"|^\d+ files? would be reformatted|^help: "
)


def ruff(lines: list[str]) -> list[int]:
    """Diagnostics (code, message, location, help) and the counts; `ruff format --check`."""
    keep = _matching(lines, _RUFF_CONCISE)
    for i, line in enumerate(lines[:-1]):
        if _RUFF_HEAD.match(line) and _RUFF_ARROW.match(lines[i + 1]):
            keep += [i, i + 1]
    keep += _matching(lines, re.compile(r"^Would reformat: "))
    if not keep:
        return []
    return sorted(set(keep) | set(_matching(lines, _RUFF_KEEP)))


# mypy's errors (https://mypy.readthedocs.io/en/stable/error_code_list.html), notes, total.
_MYPY_ERROR = re.compile(r"^[^\s:][^:]*\.pyi?:\d+(:\d+)?: error: ")
_MYPY_NOTE = re.compile(r"^[^\s:][^:]*\.pyi?:\d+(:\d+)?: note: ")
_MYPY_TOTAL = re.compile(r"^Found \d+ errors? in \d+ files? \(checked ")


def mypy(lines: list[str]) -> list[int]:
    """`error:` lines, the `note:` lines right after them, and the total."""
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _MYPY_ERROR.match(line) or (keep and keep[-1] == i - 1 and _MYPY_NOTE.match(line)):
            keep.append(i)
    if not keep:
        return []
    return keep + _matching(lines, _MYPY_TOTAL)


# eslint's default "stylish" formatter: a file's path, then `  line:col  error  msg  rule`.
_ESLINT_PROBLEM = re.compile(r"^\s+\d+:\d+\s+(error|warning)\s+\S")
_ESLINT_TOTAL = re.compile(r"^\S? ?\d+ problems? \(\d+ errors?, \d+ warnings?\)")


def eslint(lines: list[str]) -> list[int]:
    """Each file with problems, its problem lines, and the total."""
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _ESLINT_PROBLEM.match(line):
            before = lines[i - 1] if i else ""
            if before.strip() and not _ESLINT_PROBLEM.match(before):
                keep.append(i - 1)  # the file's path
            keep.append(i)
    total = _matching(lines, _ESLINT_TOTAL)
    if not keep or not total:
        return []
    return sorted(set(keep + total))


# tsc: `file(line,col): error TSxxxx: msg` (or `file:line:col - error TSxxxx:` with --pretty),
# long messages continue on indented lines.
_TSC_ERROR = re.compile(r"^\S.*(\(\d+,\d+\): | ?:\d+:\d+ - )error TS\d+: ")
_TSC_TOTAL = re.compile(r"^Found \d+ errors? in ")


def tsc(lines: list[str]) -> list[int]:
    """The TS errors with their indented continuation lines, and the total."""
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _TSC_ERROR.match(line):
            keep += _block(lines, i, lambda text: not text.startswith("  "))
    if not keep:
        return []
    return keep + _matching(lines, _TSC_TOTAL)


# go test: https://pkg.go.dev/cmd/go#hdr-Test_packages
_GO_FAIL = re.compile(r"^(\s*)--- FAIL: ")
_GO_KEEP = re.compile(
    r"^FAIL\s+\S+|^# \S+|^\S+\.go:\d+:\d+: |^panic: |^\s+\S+_test\.go:\d+"
    r"|^\s+(?!\S*/src/(runtime|testing)/)/\S+\.go:\d+"
)


def go_test(lines: list[str]) -> list[int]:
    """FAIL lines with the test's messages under them, build errors, panics."""
    keep: list[int] = []
    for i, line in enumerate(lines):
        fail = _GO_FAIL.match(line)
        if fail:
            depth = len(fail.group(1))

            def outdented(text: str, depth: int = depth) -> bool:
                return len(text) - len(text.lstrip()) <= depth or "--- " in text[:30]

            keep += _block(lines, i, outdented)
    found = _matching(lines, _GO_KEEP)
    if not keep and not any(lines[i].startswith("FAIL") for i in found):
        return []
    return sorted(set(keep + found))


# cargo: rustc's `error[E0308]: msg` blocks, and libtest's `---- name stdout ----` sections.
_CARGO_ERROR = re.compile(r"^error(\[E\d{4}\])?: ")
_CARGO_TEST = re.compile(r"^---- \S+ stdout ----$")
_CARGO_NOISE = re.compile(r"^\s+\d+: |^\s+at |^stack backtrace:|^note: ")
_CARGO_KEEP = re.compile(r"^test result: FAILED\.|^test \S+ \.\.\. FAILED$")


def cargo(lines: list[str]) -> list[int]:
    """Compiler error blocks, each failed test's panic message, and the result line."""
    keep: list[int] = []
    for i, line in enumerate(lines):
        if _CARGO_ERROR.match(line):
            keep += _block(lines, i, lambda text: not text.strip())
        elif _CARGO_TEST.match(line):
            block = _block(lines, i, lambda text: text.startswith("----") or text == "failures:")
            keep += [j for j in block if lines[j].strip() and not _CARGO_NOISE.match(lines[j])]
    if not keep:
        return []
    return sorted(set(keep + _matching(lines, _CARGO_KEEP)))


PARSERS: dict[str, Parser] = {
    "pytest": pytest,
    "ruff": ruff,
    "mypy": mypy,
    "eslint": eslint,
    "tsc": tsc,
    "go test": go_test,
    "cargo": cargo,
}
