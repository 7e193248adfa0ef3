"""Blast radius: each rule against real commits in a real bare mirror."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from app.policy.repo_config import RepoConfig, parse_repo_config
from tasks.git.blast_radius import (
    BINARY,
    MAX_CHANGED_LINES,
    MAX_FILE_BYTES,
    MAX_FILES,
    OUTSIDE,
    PATHS_DENY,
    Violation,
    describe,
    escapes,
)
from tasks.git.guard import check_diff
from tests.doubles.markdown import code_spans, outside_code

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


class Repo:
    """A work tree to commit in, and `diff()` that checks base..HEAD in a bare mirror."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir()
        self.git("init", "--quiet", "--initial-branch=main")
        self.write(
            {
                "README.md": "hello\n",
                "src/app.py": "print('hi')\n",
                ".github/workflows/ci.yml": "on: push\n",
                "assets/logo.bin": b"\x00\x01\x02binary",
            }
        )
        self.base = self.commit("base")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.work, env=ENV, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def write(self, files: dict[str, str | bytes]) -> None:
        for name, content in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)

    def commit(self, message: str, add: bool = True) -> str:
        if add:
            self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def diff(self, config: RepoConfig | None = None, add: bool = True) -> list[Violation]:
        head = self.commit("change", add)
        mirror = self.root / "mirror.git"
        if mirror.exists():
            subprocess.run(["rm", "-rf", str(mirror)], check=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--bare", str(self.work), str(mirror)],
            env=ENV,
            check=True,
            capture_output=True,
        )
        return check_diff(mirror, self.base, head, config or RepoConfig())


def config(text: str) -> RepoConfig:
    parsed, unknown = parse_repo_config(text)
    assert not unknown
    return parsed


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def rules(violations: list[Violation]) -> list[str]:
    return [v.rule for v in violations]


def test_a_small_change_passes(repo: Repo) -> None:
    repo.write({"src/app.py": "print('hello')\n", "src/new.py": "X = 1\n"})
    assert repo.diff() == []


def test_workflows_are_denied_by_default(repo: Repo) -> None:
    repo.write({".github/workflows/ci.yml": "on: [push, pull_request]\n"})
    (violation,) = repo.diff()
    assert violation.rule == PATHS_DENY
    assert violation.path == ".github/workflows/ci.yml"
    assert "`.github/workflows/ci.yml`" in violation.message
    assert "`.github/workflows/**`" in violation.message


def test_deleting_a_denied_file_is_refused_too(repo: Repo) -> None:
    (repo.work / ".github/workflows/ci.yml").unlink()
    assert rules(repo.diff()) == [PATHS_DENY]


def test_a_rename_into_a_denied_path_is_caught(repo: Repo) -> None:
    repo.git("mv", "src/app.py", ".github/workflows/app.yml")
    (violation,) = repo.diff()
    assert violation.rule == PATHS_DENY and violation.path == ".github/workflows/app.yml"


def test_deny_patterns_follow_gitignore_rules(repo: Repo) -> None:
    repo.write({"deploy/keys/prod.pem": "key\n", "docs/guide.md": "x\n"})
    found = repo.diff(config("paths:\n  deny: ['*.pem', '/docs/']\n"))
    assert rules(found) == [PATHS_DENY]
    assert "deploy/keys/prod.pem" in found[0].message and "docs/guide.md" in found[0].message
    assert ".github/workflows" not in found[0].message  # the repo replaced the default list


def test_a_negated_pattern_cannot_allow_a_denied_path(repo: Repo) -> None:
    repo.write({".github/workflows/ci.yml": "on: pull_request\n"})
    denied = config("paths:\n  deny: ['.github/workflows/**', '!.github/workflows/ci.yml']\n")
    assert rules(repo.diff(denied)) == [PATHS_DENY]


def test_too_many_files(repo: Repo) -> None:
    repo.write({f"src/m{n}.py": f"N = {n}\n" for n in range(3)})
    (violation,) = repo.diff(config("limits:\n  max_files: 2\n"))
    assert violation.rule == MAX_FILES
    assert "3 files" in violation.message and "2 allowed" in violation.message
    assert repo.diff(config("limits:\n  max_files: 3\n")) == []


def test_too_many_changed_lines(repo: Repo) -> None:
    repo.write({"src/app.py": "".join(f"line {n}\n" for n in range(30))})
    (violation,) = repo.diff(config("limits:\n  max_changed_lines: 10\n"))
    assert violation.rule == MAX_CHANGED_LINES
    assert "31 lines" in violation.message  # 30 added, 1 removed


def test_binary_files_added_or_changed_are_refused(repo: Repo) -> None:
    repo.write({"tools/helper": b"\x7fELF\x00\x00\x00", "assets/logo.bin": b"\x00changed"})
    (violation,) = repo.diff()
    assert violation.rule == BINARY
    assert "`tools/helper`" in violation.message and "`assets/logo.bin`" in violation.message


def test_deleting_a_binary_is_fine(repo: Repo) -> None:
    (repo.work / "assets/logo.bin").unlink()
    assert repo.diff() == []


def test_oversized_files_are_refused(repo: Repo) -> None:
    repo.write({"data/big.json": "x" * 5000 + "\n"})  # one line: only the size rule applies
    (violation,) = repo.diff(config("limits:\n  max_file_bytes: 4096\n"))
    assert violation.rule == MAX_FILE_BYTES
    assert "`data/big.json` (5001 bytes)" in violation.message
    assert repo.diff(config("limits:\n  max_file_bytes: 6000\n")) == []


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside", "./../../x"])
def test_symlinks_out_of_the_repository_are_refused(repo: Repo, target: str) -> None:
    (repo.work / "src").mkdir(exist_ok=True)
    os.symlink(target, repo.work / "src" / "link")
    (violation,) = repo.diff()
    assert violation.rule == OUTSIDE
    assert "`src/link`" in violation.message and target in violation.message


def test_symlinks_inside_the_repository_are_fine(repo: Repo) -> None:
    os.symlink("../README.md", repo.work / "src" / "readme")
    assert repo.diff() == []


def test_submodules_are_refused(repo: Repo) -> None:
    sha = repo.git("rev-parse", "HEAD")
    repo.write({".gitmodules": '[submodule "lib"]\n\tpath = vendor/lib\n\turl = ../x\n'})
    repo.git("add", ".gitmodules")
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{sha},vendor/lib")
    (violation,) = repo.diff(add=False)
    assert violation.rule == OUTSIDE
    assert "`vendor/lib` (a submodule)" in violation.message
    assert "`.gitmodules`" in violation.message


def test_every_broken_rule_is_reported_and_named_in_the_comment(repo: Repo) -> None:
    repo.write(
        {
            ".github/workflows/ci.yml": "on: push\njobs: {}\n",
            "bin/tool": b"\x00\x01",
            **{f"src/m{n}.py": "a\nb\nc\n" for n in range(5)},
        }
    )
    found = repo.diff(config("limits:\n  max_files: 4\n  max_changed_lines: 10\n"))
    assert rules(found) == [PATHS_DENY, MAX_FILES, MAX_CHANGED_LINES, BINARY]
    body = describe(found)
    for rule in (PATHS_DENY, MAX_FILES, MAX_CHANGED_LINES, BINARY):
        assert f"**{rule}**" in body
    assert str(found[0]).startswith("paths.deny: ")


def test_escapes() -> None:
    assert escapes("a/link", "/abs")
    assert escapes("link", "..")
    assert escapes("a/b/link", "../../../x")
    assert not escapes("a/b/link", "../../x")
    assert not escapes("a/link", "b/c")
    assert escapes("a/link", "")


def test_names_from_the_commits_stay_code_in_the_report(repo: Repo) -> None:
    """A pushed path or symlink target (the agent's, a PR's) cannot leave its code span to
    mention anyone in the comment that lists the violations (change.report, rebase)."""
    evil = "a`@mallory`b"
    repo.write({f".github/workflows/{evil}.yml": "on: push\n"})
    os.symlink(f"/etc/{evil}", repo.work / "src" / "link")
    text = describe(repo.diff())
    spans = code_spans(text)
    assert f".github/workflows/{evil}.yml" in spans and f"/etc/{evil}" in spans, spans
    assert "@mallory" not in outside_code(text)
