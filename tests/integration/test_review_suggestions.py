"""Linter findings and fixes become comments on changed lines only; their suggestions,
applied as GitHub applies them, leave ruff clean. Real ruff and git on a real repository."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tasks.review.diff import (
    DIFF_OPTIONS,
    apply_suggestions,
    changed_lines,
    parse_diff,
    suggestions_in,
)
from tasks.review.findings import (
    Exec,
    applicable,
    detect,
    fixers,
    label,
    parse_eslint,
    parse_mypy,
    run_fixers,
    run_linters,
)
from tasks.review.suggest import Built, ReviewComment, build_comments, edits_from
from tasks.sandbox.base import ExecResult
from tests.integration.test_review_diff import ENV, commit, git

pytestmark = pytest.mark.skipif(shutil.which("ruff") is None, reason="needs ruff")

BASE_APP = '"""App."""\n\nimport json\n\n\ndef keep() -> int:\n    return 1\n'
HEAD_APP = '''"""App."""

import json
import os
import sys


def keep() -> int:
    return 1


def added(x):
    y=[1,2,
    3]
    return sys.argv[x]+y
def second():
    return 2
'''
BASE_OTHER = "import json\n\n\ndef old():\n    return 1\n"
HEAD_OTHER = "import json\n\n\ndef old():\n    return missing_name\n"


def local(root: Path) -> Exec:
    """Commands run in `root` on this machine, as the sandbox runs them in /workspace."""

    def run(cmd: Sequence[str] | str) -> ExecResult:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        done = subprocess.run(argv, cwd=root, env=ENV, capture_output=True, text=True)
        return ExecResult(done.returncode, done.stdout, done.stderr)

    return run


def review(repo: Path, base: str, head: str) -> tuple[Built, dict[str, set[int]]]:
    """What the review_pr blueprint does between checkout and posting, on this machine."""
    changed = changed_lines(parse_diff(git(repo, *DIFF_OPTIONS, base, head)))
    run = local(repo)
    found = detect(run)
    chosen = applicable(found, changed.paths)
    findings, runs = run_linters(run, chosen, root=str(repo))
    assert [r.name for r in runs if r.error is None] == ["ruff check"], runs
    commands = fixers(found, chosen, None)
    run_fixers(run, commands)
    fixed = run(["git", *DIFF_OPTIONS, "HEAD", "--", *changed.paths])
    edits = edits_from(
        parse_diff(fixed.stdout), lambda p: git(repo, "show", f"HEAD:{p}").splitlines(), changed
    )
    return build_comments(findings, edits, changed, [label(c) for c in commands]), changed.right


def applied(repo: Path, path: str, comments: list[ReviewComment]) -> str:
    """The head's file with every suggestion on it committed, as a batch commit does."""
    text = git(repo, "show", f"HEAD:{path}")
    edits = []
    for c in comments:
        if c.path == path and suggestions_in(c.body):
            (lines,) = suggestions_in(c.body)
            edits.append((c.start_line or c.line, c.line, lines))
    return apply_suggestions(text, edits)


def test_suggestions_sit_on_changed_lines_and_leave_ruff_clean(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    config = '[project]\nname = "x"\nversion = "0"\n\n[tool.ruff]\nline-length = 100\n'
    base = commit(repo, {"pyproject.toml": config, "app.py": BASE_APP, "other.py": BASE_OTHER})
    head = commit(repo, {"app.py": HEAD_APP, "other.py": HEAD_OTHER})
    built, changed = review(repo, base, head)

    for c in built.comments:
        first = c.start_line or c.line
        assert all(n in changed[c.path] for n in range(first, c.line + 1)), c
        assert c.api()["side"] == "RIGHT"
    by_path = {p: [c for c in built.comments if c.path == p] for p in ("app.py", "other.py")}
    assert all(suggestions_in(c.body) for c in by_path["app.py"])
    assert any("`F401`" in c.body for c in by_path["app.py"])
    assert any("would write" in c.body for c in by_path["app.py"])  # a formatter's change
    assert any(c.start_line for c in by_path["app.py"])  # a multi-line suggestion
    # `missing_name` has no fix: a plain comment; `import json` (unchanged) is left alone
    (plain,) = by_path["other.py"]
    assert plain.line == 5 and "`F821`" in plain.body and not suggestions_in(plain.body)
    assert built.outside >= 1

    check = tmp_path / "check"
    check.mkdir()
    shutil.copy(repo / "pyproject.toml", check)
    (check / "app.py").write_text(applied(repo, "app.py", built.comments))
    lint = subprocess.run(
        ["ruff", "check", "--no-cache", "--output-format", "concise", "app.py"],
        cwd=check,
        capture_output=True,
        text=True,
    )
    # only `import json` is left: unused, but on a line the pull request did not change
    (left,) = [line for line in lint.stdout.splitlines() if line.startswith("app.py:")]
    assert left.startswith("app.py:3:") and "F401" in left, lint.stdout
    fmt = subprocess.run(
        ["ruff", "format", "--check", "--no-cache", "app.py"], cwd=check, capture_output=True
    )
    assert fmt.returncode == 0, (check / "app.py").read_text()


def test_parsers_read_mypy_and_eslint_output() -> None:
    mypy = (
        "/workspace/pkg/m.py:3:5: error: Incompatible return value type  [return-value]\n"
        "pkg/m.py:4: note: See docs\n"
        "pkg/n.py:10: error: Name 'x' is not defined  [name-defined]\n"
    )
    found = parse_mypy(mypy)
    assert [(f.path, f.line, f.code) for f in found] == [
        ("pkg/m.py", 3, "return-value"),
        ("pkg/n.py", 10, "name-defined"),
    ]
    eslint = (
        '[{"filePath": "/workspace/src/a.js", "messages": [{"ruleId": "no-unused-vars", '
        '"severity": 2, "message": "\'x\' is unused.", "line": 2, "column": 7}]}]'
    )
    (f,) = parse_eslint(eslint)
    assert (f.path, f.line, f.code, f.tool) == ("src/a.js", 2, "no-unused-vars", "eslint")
