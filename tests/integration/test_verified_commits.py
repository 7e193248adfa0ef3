"""Which commits onloop asks GitHub to make on a verified-commits branch, read from a real git
repository (tasks/blueprints/verified.py `commits_to_make`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tasks.blueprints.verified import commits_to_make
from tasks.runner.context import JobFailed


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
    }
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _commit(repo: Path, name: str, text: str, message: str = "") -> str:
    (repo / name).write_text(text)
    _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", message or f"{name}: {text.strip()}")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q", "-b", "main")
    _commit(tmp_path, "README", "hi\n")
    return tmp_path


def test_the_commits_since_the_lease_oldest_first(repo: Path) -> None:
    lease = _git(repo, "rev-parse", "HEAD")
    first, second = _commit(repo, "a", "1\n"), _commit(repo, "b", "2\n")
    assert commits_to_make(repo, second, lease) == (lease, [first, second])


def test_a_new_branch_starts_where_the_commits_leave_the_known_branches(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "--detach")
    first, second = _commit(repo, "a", "1\n"), _commit(repo, "b", "2\n")
    assert commits_to_make(repo, second, "") == (base, [first, second])


def test_a_rewritten_history_is_refused_unless_the_branch_holds_those_files(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    made = _commit(repo, "a", "1\n")  # as GitHub made it in an earlier run of the job
    _git(repo, "checkout", "-q", "--detach", base)
    again = _commit(repo, "a", "1\n", "again")  # the same change, committed by this run
    assert again != made and commits_to_make(repo, again, made) == (made, [])
    other = _commit(repo, "b", "2\n")
    with pytest.raises(JobFailed, match="never rewrite it"):
        commits_to_make(repo, other, made)
