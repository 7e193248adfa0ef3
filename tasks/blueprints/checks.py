"""The repository's own checks in the sandbox: fixers (configured or detected), then validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.core.markdown import inline_code
from app.github.comments import details
from app.policy.repo_config import RepoConfig
from tasks.sandbox.base import ExecResult, Sandbox

# What each detected tool contributes: (marker the probe prints, fix command, check command).
DETECTORS: tuple[tuple[str, str, str], ...] = (
    ("ruff", "ruff check --fix .", "ruff check ."),
    ("ruff", "ruff format .", "ruff format --check ."),
    ("black", "black .", "black --check ."),
    ("isort", "isort .", "isort --check-only ."),
    ("prettier", "npx --no-install prettier --write .", "npx --no-install prettier --check ."),
    ("eslint", "npx --no-install eslint --fix .", "npx --no-install eslint ."),
    ("gofmt", "gofmt -w .", 'test -z "$(gofmt -l .)"'),
    ("cargo", "cargo fmt", "cargo fmt --check"),
)
# A shell probe run in the workspace: prints one marker per line for each tool that the
# repository uses and the sandbox has.
PROBE = r"""
has() { command -v "$1" >/dev/null 2>&1; }
py=""; [ -f pyproject.toml ] && py=$(cat pyproject.toml)
tool() { printf '%s' "$py" | grep -q "^\[tool\.$1"; }
if has ruff && { [ -f ruff.toml ] || [ -f .ruff.toml ] || tool ruff; }; then echo ruff; fi
if has black && tool black; then echo black; fi
if has isort && { [ -f .isort.cfg ] || tool isort; }; then echo isort; fi
if [ -f package.json ] && has npx; then
  grep -q '"prettier"' package.json && echo prettier
  grep -q '"eslint"' package.json && echo eslint
fi
if [ -f go.mod ] && has gofmt; then echo gofmt; fi
if [ -f Cargo.toml ] && has cargo; then echo cargo; fi
if [ -f pytest.ini ] || tool pytest; then python3 -c 'import pytest' 2>/dev/null && echo pytest; fi
exit 0
"""


@dataclass
class Plan:
    """The commands a job runs: fixers, then the checks that must pass before any push."""

    fix: list[str] = field(default_factory=list)
    check: list[str] = field(default_factory=list)
    test: str | None = None
    detected: bool = False

    @property
    def validation(self) -> list[str]:
        return [*self.check, *([self.test] if self.test else [])]


@dataclass
class Outcome:
    command: str
    result: ExecResult

    @property
    def ok(self) -> bool:
        return self.result.ok


def plan(box: Sandbox, config: RepoConfig) -> Plan:
    """`checks.fix` and `checks.test` from the config; what is unset is detected."""
    found: list[str] = []
    if config.checks.fix is None or config.checks.test is None:
        probe = box.exec(["sh", "-c", PROBE], timeout=60)
        found = probe.stdout.split() if probe.ok else []
    result = Plan(test=config.checks.test)
    if config.checks.fix is not None:
        result.fix = list(config.checks.fix)
        result.check = [c for f in result.fix if (c := check_mode(f))]
    else:
        result.detected = True
        for marker, fix, check in DETECTORS:
            if marker in found:
                result.fix.append(fix)
                result.check.append(check)
    if result.test is None and "pytest" in found:
        result.test = "python3 -m pytest -q"
    return result


def check_mode(fix: str) -> str | None:
    """The check-only form of a known fixer command (so a fix is verified), else None."""
    words = re.sub(r"\s+", " ", fix.strip())
    for _, known_fix, check in DETECTORS:
        if words == known_fix:
            return check
    if words.startswith("ruff check") and "--fix" in words:
        return words.replace(" --fix", "")
    if words.startswith("ruff format") and "--check" not in words:
        return "ruff format --check" + words[len("ruff format") :]
    return None


def run_all(box: Sandbox, commands: list[str], timeout: float | None = None) -> list[Outcome]:
    """Run each command with `sh -c` in the workspace; every outcome is kept."""
    return [Outcome(c, box.exec(["sh", "-c", c], timeout=timeout)) for c in commands]


def summary(outcomes: list[Outcome]) -> str:
    """One line a command: ✓/✗ and the command."""
    return "\n".join(f"{'✓' if o.ok else '✗'} {inline_code(o.command)}" for o in outcomes)


def failures(outcomes: list[Outcome]) -> str:
    """The failed commands, each with its output folded in <details>."""
    return "\n\n".join(
        details(f"`{o.command}` failed (exit {o.result.exit_code})", o.result.output, 2000)
        for o in outcomes
        if not o.ok
    )
