"""bench/e2e.py's floors do the work they stand for, against the GitHub double: a floor that
pushed nothing would make every ratio look bad for onloop (importing bench.e2e here also
keeps the bench importable)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.e2e import BAD, PYPROJECT
from bench.e2e_floor import REPO, Floor
from tests.doubles.github.double import GitHubDouble


def git(double: GitHubDouble, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=double.git_dir(REPO), capture_output=True, text=True, check=True
    )
    return done.stdout


def test_the_rebase_and_ruff_floors_push_what_onloop_would(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo(REPO, files={"pyproject.toml": PYPROJECT, "README.md": "teh\n"})
    double.set_permission(REPO, "alice", "write")
    floor = Floor(double, tmp_path)
    double.create_branch(REPO, "feature")
    double.commit(REPO, "feature", {"bad.py": BAD}, message="Add bad.py")
    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    assert floor.rebase("feature") > 0
    main = double.branch_sha(REPO, "main")
    assert main is not None
    git(double, "merge-base", "--is-ancestor", main, "feature")  # raises unless rebased
    floor.ruff_fix("feature")
    fixed = git(double, "show", "feature:bad.py")
    assert "import os" not in fixed and "import sys" in fixed
