"""The GitHub double across forks: `refs/pull/N/head`, and maintainers' pushes into a fork."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.doubles.github import GitHubDouble

REPO, FORK = "octo/hello", "dave/hello"


def git(
    *args: str, cwd: Path | None = None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo(REPO, files={"README.md": "hi\n"})
    github_double.create_repo(FORK, fork_of=REPO)
    github_double.set_permission(REPO, "alice", "write")
    github_double.set_permission(REPO, "tom", "triage")
    return github_double


def pull(double: GitHubDouble, *, maintainer_can_modify: bool) -> tuple[int, str]:
    sha = double.commit(FORK, "patch", {"patch.txt": "p\n"}, message="Patch")
    number = double.create_pull(
        REPO, "dave:patch", user="dave", maintainer_can_modify=maintainer_can_modify
    ).number
    return number, sha


def test_pull_heads_from_forks_are_fetchable_from_the_base(
    double: GitHubDouble, tmp_path: Path
) -> None:
    number, sha = pull(double, maintainer_can_modify=False)
    env = double.git_env(double.issue_user_token("alice"))
    ref = f"refs/pull/{number}/head"
    listed = git("ls-remote", double.clone_url(REPO), ref, env=env)
    assert listed.stdout.split() == [sha, ref]
    moved = double.commit(FORK, "patch", {"patch.txt": "p2\n"}, message="More")
    mirror = tmp_path / "m.git"
    git("init", "-q", "--bare", str(mirror), env=env)
    fetched = git("fetch", "-q", double.clone_url(REPO), f"+{ref}:{ref}", cwd=mirror, env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert git("rev-parse", ref, cwd=mirror, env=env).stdout.strip() == moved


def _try_push(double: GitHubDouble, tmp_path: Path, login: str, branch: str) -> str:
    env = double.git_env(double.issue_user_token(login))
    work = tmp_path / f"work-{login}-{branch}"
    assert git("clone", "-q", double.clone_url(FORK), str(work), env=env).returncode == 0
    git("checkout", "-q", "origin/patch", cwd=work, env=env)
    git("commit", "-q", "--allow-empty", "-m", "maintainer edit", cwd=work, env=env)
    done = git("push", "origin", f"HEAD:refs/heads/{branch}", cwd=work, env=env)
    return "" if done.returncode == 0 else done.stderr


def test_maintainers_may_push_to_the_head_of_a_pull_that_allows_it(
    double: GitHubDouble, tmp_path: Path
) -> None:
    pull(double, maintainer_can_modify=True)
    before = double.branch_sha(FORK, "patch")
    assert _try_push(double, tmp_path, "alice", "patch") == ""
    (push,) = double.pushes
    assert (push.repo, push.identity.login, push.updates[0].old) == (FORK, "alice", before)
    assert "hidden ref" in _try_push(double, tmp_path, "alice", "other")  # only the PR's head
    assert "403" in _try_push(double, tmp_path, "tom", "patch")  # triage: no write upstream
    assert len(double.pushes) == 1


def test_without_maintainer_edits_the_fork_is_not_theirs(
    double: GitHubDouble, tmp_path: Path
) -> None:
    pull(double, maintainer_can_modify=False)
    assert "403" in _try_push(double, tmp_path, "alice", "patch")
    assert double.pushes == []
