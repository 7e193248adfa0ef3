"""Linters in the sandbox: which apply, their findings (ruff, mypy, eslint) and the fixers."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.sandbox.base import WORKDIR, ExecResult

Exec = Callable[[Sequence[str] | str], ExecResult]
PY = (".py", ".pyi")
JS = (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts")
ESLINT = "node_modules/.bin/eslint"
OUTPUT_TAIL = 3000

# One look at the sandbox: which tools exist and which configurations the repository has.
DETECT = r"""
for tool in ruff mypy; do command -v "$tool" >/dev/null 2>&1 && echo "tool:$tool"; done
test -x node_modules/.bin/eslint && echo tool:eslint
for f in ruff.toml .ruff.toml mypy.ini .mypy.ini; do test -f "$f" && echo "file:$f"; done
grep -qs '^\[tool\.ruff' pyproject.toml && echo file:pyproject.toml:ruff
grep -qs '^\[tool\.mypy' pyproject.toml && echo file:pyproject.toml:mypy
grep -qs '^\[mypy' setup.cfg && echo file:setup.cfg:mypy
grep -qs '"eslint"' package.json && echo file:package.json:eslint
true
"""


@dataclass(frozen=True)
class Finding:
    """One problem a linter reported at `path`:`line` (1-based, in the PR's head)."""

    tool: str
    path: str
    line: int
    message: str
    code: str = ""

    def markdown(self) -> str:
        code = f" `{self.code}`" if self.code else ""
        return f"**{self.tool}**{code}: {self.message}"


@dataclass
class ToolRun:
    """What one linter or fixer command did, for the review body and the job's steps."""

    name: str
    command: str
    exit_code: int
    output: str = ""
    findings: int = 0
    error: str | None = None  # it could not run (bad config, crash, timeout)

    def summary(self) -> str:
        if self.error:
            return f"`{self.name}` could not run: {self.error}"
        return f"`{self.name}`: {self.findings} finding{'s' * (self.findings != 1)}"


@dataclass
class Detected:
    tools: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)

    @property
    def ruff_config(self) -> bool:
        return bool({"ruff.toml", ".ruff.toml", "pyproject.toml:ruff"} & self.files)

    @property
    def mypy_config(self) -> bool:
        return bool({"mypy.ini", ".mypy.ini", "pyproject.toml:mypy", "setup.cfg:mypy"} & self.files)


def detect(run: Exec) -> Detected:
    done = run(DETECT)
    found = Detected()
    for line in done.stdout.splitlines():
        kind, _, name = line.strip().partition(":")
        if kind == "tool":
            found.tools.add(name)
        elif kind == "file":
            found.files.add(name)
    return found


def relative(path: str, root: str = WORKDIR) -> str:
    """A tool's path as a repository path: /workspace/a/b.py and ./a/b.py become a/b.py."""
    path = path.replace("\\", "/")
    if path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1 :]
    return posixpath.normpath(path).lstrip("/") if path else path


def _tail(result: ExecResult) -> str:
    return result.output[-OUTPUT_TAIL:]


def _json(text: str) -> Any:
    """The JSON document in a tool's stdout (some print a line or two before it)."""
    for start in (0, *(m.start() for m in re.finditer(r"^[\[{]", text, re.M))):
        try:
            return json.loads(text[start:])
        except ValueError:
            continue
    raise ValueError("no JSON in the output")


def parse_ruff(stdout: str, root: str = WORKDIR) -> list[Finding]:
    """`ruff check --output-format json`."""
    out = []
    for item in _json(stdout):
        loc = item.get("location") or {}
        out.append(
            Finding(
                "ruff",
                relative(str(item.get("filename", "")), root),
                int(loc.get("row") or 1),
                str(item.get("message", "")),
                str(item.get("code") or ""),
            )
        )
    return out


_MYPY = re.compile(
    r"^(?P<path>[^:\n]+):(?P<line>\d+):(?:\d+:)? (?P<level>error|warning|note): "
    r"(?P<message>.*?)(?:  \[(?P<code>[\w-]+)\])?$"
)


def parse_mypy(stdout: str, root: str = WORKDIR) -> list[Finding]:
    """mypy's `path:line:col: error: message  [code]` lines (notes are left out)."""
    out = []
    for line in stdout.splitlines():
        m = _MYPY.match(line)
        if m and m.group("level") != "note":
            out.append(
                Finding(
                    "mypy",
                    relative(m.group("path"), root),
                    int(m.group("line")),
                    m.group("message"),
                    m.group("code") or "",
                )
            )
    return out


def parse_eslint(stdout: str, root: str = WORKDIR) -> list[Finding]:
    """`eslint --format json`."""
    out = []
    for file in _json(stdout):
        for msg in file.get("messages") or []:
            out.append(
                Finding(
                    "eslint",
                    relative(str(file.get("filePath", "")), root),
                    int(msg.get("line") or 1),
                    str(msg.get("message", "")),
                    str(msg.get("ruleId") or ""),
                )
            )
    return out


@dataclass(frozen=True)
class Linter:
    name: str
    argv: Callable[[list[str]], list[str]]
    parse: Callable[[str, str], list[Finding]]
    ok_codes: tuple[int, ...]  # exit codes of a run that worked (findings or not)


RUFF = ("ruff", "check", "--output-format", "json", "--no-cache", "--exit-zero")
MYPY = (
    "mypy",
    "--show-column-numbers",
    "--no-error-summary",
    "--no-pretty",
    "--no-color-output",
    "--hide-error-context",
    "--cache-dir=/tmp/.mypy_cache",
)
ESLINT_JSON = (ESLINT, "--format", "json", "--no-error-on-unmatched-pattern")
LINTERS = {
    "ruff": Linter("ruff check", lambda paths: [*RUFF, "--", *paths], parse_ruff, (0,)),
    "mypy": Linter("mypy", lambda paths: [*MYPY, "--", *paths], parse_mypy, (0, 1)),
    "eslint": Linter("eslint", lambda paths: [*ESLINT_JSON, "--", *paths], parse_eslint, (0, 1)),
}


def applicable(found: Detected, paths: Sequence[str]) -> dict[str, list[str]]:
    """Linter name → the changed paths it looks at. ruff runs on any Python change (its
    default rules find bugs, not style); mypy only where the repository configures it;
    eslint where the repository installed it (node_modules, by `sandbox.setup`)."""
    py = [p for p in paths if p.endswith(PY)]
    js = [p for p in paths if p.endswith(JS)]
    chosen: dict[str, list[str]] = {}
    if py and "ruff" in found.tools:
        chosen["ruff"] = py
    if py and "mypy" in found.tools and found.mypy_config:
        chosen["mypy"] = py
    if js and "eslint" in found.tools:
        chosen["eslint"] = js
    return chosen


def run_linters(
    run: Exec, chosen: dict[str, list[str]], root: str = WORKDIR
) -> tuple[list[Finding], list[ToolRun]]:
    """Each chosen linter once, in report mode (in `root`, where the checkout is); a linter
    that fails is reported, not fatal."""
    findings: list[Finding] = []
    runs: list[ToolRun] = []
    for key, paths in chosen.items():
        linter = LINTERS[key]
        argv = linter.argv(paths)
        done = run(argv)
        record = ToolRun(linter.name, shlex.join(argv[:4]) + " …", done.exit_code, _tail(done))
        runs.append(record)
        if done.timed_out:
            record.error = "it ran out of time"
            continue
        try:
            found = linter.parse(done.stdout, root)
        except (ValueError, TypeError, AttributeError) as exc:
            found, record.error = [], f"exit code {done.exit_code}, unreadable output ({exc})"
        if not found and done.exit_code not in linter.ok_codes and record.error is None:
            record.error = f"exit code {done.exit_code}"
        record.findings = len(found)
        findings += found
    return findings, runs


def fixers(
    found: Detected, chosen: dict[str, list[str]], configured: Sequence[str] | None
) -> list[str | list[str]]:
    """The commands whose changes become suggestions: the repository's `checks.fix` as
    written, or else ruff's safe fixes, `ruff format` (when the repository configures
    ruff) and `eslint --fix`, on the changed files only."""
    if configured:
        return list(configured)
    out: list[str | list[str]] = []
    py = chosen.get("ruff")
    if py:
        out.append(["ruff", "check", "--fix", "--no-cache", "--exit-zero", "--quiet", "--", *py])
        if found.ruff_config:
            out.append(["ruff", "format", "--no-cache", "--quiet", "--", *py])
    if chosen.get("eslint"):
        out.append([ESLINT, "--fix", "--no-error-on-unmatched-pattern", "--", *chosen["eslint"]])
    return out


def label(command: str | list[str]) -> str:
    """A short name for a fixer command, for comments: `ruff format`, `black .`."""
    words = shlex.split(command) if isinstance(command, str) else list(command)
    words = [posixpath.basename(w) if i == 0 else w for i, w in enumerate(words)]
    keep = [w for w in words if not w.startswith("-") and w != "--"]
    short = keep[:2] if len(keep) > 1 and not keep[1].endswith(PY + JS) else keep[:1]
    return " ".join(short)


def run_fixers(run: Exec, commands: Sequence[str | list[str]]) -> list[ToolRun]:
    """Run each fixer in the workspace; their combined change is read with `fix_diff`."""
    runs = []
    for cmd in commands:
        done = run(cmd)
        record = ToolRun(label(cmd), cmd if isinstance(cmd, str) else shlex.join(cmd), 0)
        record.exit_code, record.output = done.exit_code, _tail(done)
        if done.timed_out:
            record.error = "it ran out of time"
        runs.append(record)
    return runs
