"""The guard over every pushed commit, and a rebase's replay, against real git repositories."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.policy.repo_config import RepoConfig, parse_repo_config
from tasks.git.blast_radius import (
    BINARY,
    GUARD_TIME,
    HISTORY,
    MAX_FILE_BYTES,
    MODES,
    OUTSIDE,
    PATHS_DENY,
    REPLAY,
    Violation,
)
from tasks.git.guard import check_diff

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


class Repo:
    """A work tree to commit in; `check` copies it to a bare mirror and runs the guard."""

    def __init__(self, root: Path) -> None:
        self.root, self.work = root, root / "work"
        self.work.mkdir()
        self.git("init", "--quiet", "--initial-branch=main")
        self.write({"README.md": "hello\n", "src/app.py": "".join(f"L{n}\n" for n in range(20))})
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

    def remove(self, *names: str) -> None:
        self.git("rm", "--quiet", "-r", *names)

    def commit(self, message: str) -> str:
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def mirror(self) -> Path:
        mirror = self.root / "mirror.git"
        subprocess.run(["rm", "-rf", str(mirror)], check=True)
        subprocess.run(
            ["git", "clone", "--quiet", "--mirror", str(self.work), str(mirror)],
            env=ENV,
            check=True,
            capture_output=True,
        )
        return mirror

    def check(
        self,
        head: str | None = None,
        config: RepoConfig | None = None,
        *,
        base: str | None = None,
        replay_of: str | None = None,
        seconds: float = 60.0,
    ) -> list[Violation]:
        head = head or self.git("rev-parse", "HEAD")
        return check_diff(
            self.mirror(),
            base or self.base,
            head,
            config or RepoConfig(),
            replay_of=replay_of,
            seconds=seconds,
        )


def config(text: str) -> RepoConfig:
    parsed, unknown = parse_repo_config(text)
    assert not unknown
    return parsed


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def rules(violations: list[Violation]) -> list[str]:
    return [v.rule for v in violations]


def test_a_line_of_clean_commits_passes(repo: Repo) -> None:
    repo.write({"src/a.py": "A = 1\n"})
    repo.commit("one")
    repo.write({"src/b.py": "B = 1\n"})
    repo.commit("two")
    assert repo.check() == []


def test_a_workflow_added_then_removed_is_refused(repo: Repo) -> None:
    repo.write({".github/workflows/evil.yml": "on: push\n", "src/a.py": "A = 1\n"})
    added = repo.commit("add a workflow")
    repo.remove(".github/workflows/evil.yml")
    repo.commit("and take it out again")
    (violation,) = repo.check()  # the net change is only src/a.py
    assert violation.rule == PATHS_DENY and violation.path == ".github/workflows/evil.yml"
    assert f"in commit {added[:12]}" in violation.message


def test_a_large_binary_added_then_removed_is_refused(repo: Repo) -> None:
    repo.write({"blob.bin": b"\x00" * 5000})
    added = repo.commit("add a binary")
    repo.remove("blob.bin")
    repo.commit("remove it")
    found = repo.check(config=config("limits:\n  max_file_bytes: 4096\n"))
    assert rules(found) == [BINARY, MAX_FILE_BYTES]
    assert "`blob.bin` (5000 bytes in commit " + added[:12] in found[1].message


def test_a_symlink_placed_at_a_denied_directory_is_refused(repo: Repo) -> None:
    repo.write({"ci/deploy.yml": "on: push\n"})
    (repo.work / ".github").mkdir()
    os.symlink("../ci", repo.work / ".github" / "workflows")  # `.github/workflows` -> ci/
    repo.commit("workflows by another name")
    (violation,) = repo.check()
    assert violation.rule == PATHS_DENY and violation.path == ".github/workflows"
    assert "a symlink to `../ci`" in violation.message


def test_a_symlink_into_a_denied_path_is_refused(repo: Repo) -> None:
    repo.write({".github/workflows/ci.yml": "on: push\n"})
    base = repo.commit("a workflow, in the base")
    os.symlink(".github/workflows/ci.yml", repo.work / "ci.yml")
    repo.commit("a way to write it")
    (violation,) = repo.check(base=base)
    assert violation.rule == PATHS_DENY and violation.path == "ci.yml"
    assert "`.github/workflows/**`" in violation.message


def test_a_symlink_through_another_symlink_is_refused(repo: Repo) -> None:
    os.symlink("src", repo.work / "code")
    base = repo.commit("an old symlink to a directory")
    os.symlink("code/app.py", repo.work / "app.py")
    repo.commit("a symlink through it")
    (violation,) = repo.check(base=base)
    assert violation.rule == OUTSIDE and "through another symlink" in violation.message


def test_a_symlink_out_added_then_removed_is_refused(repo: Repo) -> None:
    os.symlink("/etc/passwd", repo.work / "passwd")
    repo.commit("out")
    repo.remove("passwd")
    repo.commit("gone")
    assert rules(repo.check()) == [OUTSIDE]


def test_a_file_made_executable_is_refused(repo: Repo) -> None:
    (repo.work / "src/app.py").chmod(0o755)
    repo.commit("chmod +x")
    (violation,) = repo.check()
    assert violation.rule == MODES and "`src/app.py` (made executable" in violation.message


def test_a_submodule_added_then_removed_is_refused(repo: Repo) -> None:
    repo.git("update-index", "--add", "--cacheinfo", f"160000,{repo.base},vendor/lib")
    repo.git("commit", "--quiet", "-m", "a gitlink")
    repo.git("rm", "--quiet", "--cached", "vendor/lib")
    repo.git("commit", "--quiet", "-m", "gone")
    (violation,) = repo.check()
    assert violation.rule == OUTSIDE and "`vendor/lib` (a submodule" in violation.message


def test_a_merge_commit_is_refused(repo: Repo) -> None:
    repo.git("checkout", "--quiet", "-b", "side")
    repo.write({"side.py": "S = 1\n"})
    repo.commit("side")
    repo.git("checkout", "--quiet", "main")
    repo.write({"main.py": "M = 1\n"})
    repo.commit("main")
    repo.git("merge", "--quiet", "--no-edit", "side")
    assert rules(repo.check()) == [HISTORY]


def test_a_head_not_built_on_the_base_is_refused(repo: Repo) -> None:
    old = repo.git("rev-parse", "HEAD")
    repo.write({"src/a.py": "A = 1\n"})
    moved = repo.commit("the branch moved on")
    repo.git("reset", "--quiet", "--hard", old)
    repo.write({"src/b.py": "B = 1\n"})
    head = repo.commit("work that would drop it")
    (violation,) = repo.check(head, base=moved)
    assert violation.rule == HISTORY and "drops commits" in violation.message


def test_the_guard_is_time_boxed(repo: Repo) -> None:
    repo.write({"src/a.py": "A = 1\n"})
    repo.commit("one")
    (violation,) = repo.check(seconds=0)
    assert violation.rule == GUARD_TIME and "nothing was pushed" in violation.message


def test_a_backtracking_deny_pattern_does_not_stall_the_guard(repo: Repo) -> None:
    # Python's `re` takes about half a minute for this pattern and this 41-character path.
    name = "a" * 40 + "x"
    repo.write({name: "x\n", "a" * 20 + "b": "y\n"})
    repo.commit("long names")
    pathological = config("paths:\n  deny: ['" + "*a" * 10 + "*b']\n")
    box: dict[str, list[Violation]] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("found", repo.check(config=pathological)), daemon=True
    )
    thread.start()
    thread.join(timeout=10)  # a hang guard only
    assert not thread.is_alive(), "the guard is still matching"
    (violation,) = box["found"]
    assert violation.rule == PATHS_DENY and "`" + "a" * 20 + "b`" in violation.message
    assert name not in violation.message


# A rebase may only replay the pull request's own commits.


class Rebased:
    """main, and a pull request branch `pr` of two commits made before main moved on."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        repo.git("checkout", "--quiet", "-b", "pr")
        repo.write({"src/app.py": "".join(f"L{n}\n" if n != 10 else "TEN\n" for n in range(20))})
        repo.commit("pr: one")
        repo.write({"src/pr.py": "P = 1\n"})
        self.old_head = repo.commit("pr: two")
        repo.git("checkout", "--quiet", "main")
        repo.write({"src/app.py": "".join(f"L{n}\n" if n != 8 else "EIGHT\n" for n in range(20))})
        self.onto = repo.commit("main: a change next to the PR's")
        repo.git("checkout", "--quiet", "-b", "rebased", "pr")
        repo.git("rebase", "--quiet", self.onto)

    def check(self, head: str | None = None) -> list[Violation]:
        return self.repo.check(head, base=self.onto, replay_of=self.old_head)


@pytest.fixture
def rebased(repo: Repo) -> Rebased:
    return Rebased(repo)


def test_a_clean_rebase_passes(rebased: Rebased) -> None:
    assert rebased.check() == []


def test_a_rebase_with_an_extra_commit_is_refused(rebased: Rebased) -> None:
    rebased.repo.write({"src/extra.py": "X = 1\n"})
    extra = rebased.repo.commit("not the PR's")
    found = rebased.check()
    assert rules(found) == [REPLAY, REPLAY]
    assert f"`{extra[:12]}`" in found[0].message and "own commits" in found[1].message


def test_a_rebase_that_changes_a_commit_is_refused(rebased: Rebased) -> None:
    rebased.repo.write({"src/pr.py": "P = 2  # not what the PR said\n"})
    rebased.repo.git("commit", "--quiet", "--all", "--amend", "--no-edit")
    found = rebased.check()
    assert REPLAY in rules(found)
    assert "left out" in found[0].message  # the PR's own second commit is missing


def test_a_rebase_may_leave_out_a_commit_the_base_already_has(repo: Repo) -> None:
    rebased = Rebased(repo)
    repo.git("checkout", "--quiet", "main")
    repo.git("cherry-pick", rebased.old_head)  # main takes the PR's second commit
    rebased.onto = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "--quiet", "-B", "rebased", rebased.old_head)
    repo.git("rebase", "--quiet", rebased.onto)  # git leaves the picked one out
    assert int(repo.git("rev-list", "--count", f"{rebased.onto}..HEAD")) == 1
    assert rebased.check() == []


def test_a_rebased_pull_request_still_passes_the_rules_per_commit(repo: Repo) -> None:
    repo.git("checkout", "--quiet", "-b", "pr")
    repo.write({".github/workflows/x.yml": "on: push\n"})
    repo.commit("the PR's own workflow")
    repo.remove(".github/workflows/x.yml")
    old_head = repo.commit("and not")
    repo.git("checkout", "--quiet", "main")
    repo.write({"other.py": "O = 1\n"})
    onto = repo.commit("main moves")
    repo.git("checkout", "--quiet", "-b", "rebased", old_head)
    repo.git("rebase", "--quiet", onto)
    assert rules(repo.check(base=onto, replay_of=old_head)) == [PATHS_DENY]


def test_a_rebase_settled_by_ignoring_white_space_passes(repo: Repo) -> None:
    # rebase_pr retries a conflicting rebase with `-X ignore-space-change`; patch ids ignore
    # white space, so the PR's commit replayed over a base that only re-indented still counts.
    lines = [f"L{n}\n" for n in range(20)]
    repo.git("checkout", "--quiet", "-b", "pr")
    repo.write({"src/app.py": "".join([*lines[:10], "TEN\n", *lines[11:]])})
    old_head = repo.commit("pr: a real change")
    repo.git("checkout", "--quiet", "main")
    repo.write({"src/app.py": "".join([*lines[:10], "L10   \n", *lines[11:]])})
    onto = repo.commit("main: white space only, on the same line")
    repo.git("checkout", "--quiet", "-b", "rebased", old_head)
    with pytest.raises(subprocess.CalledProcessError):
        repo.git("rebase", "--quiet", onto)
    repo.git("rebase", "--abort")
    repo.git("rebase", "--quiet", "-X", "ignore-space-change", onto)
    assert repo.check(base=onto, replay_of=old_head) == []


def test_one_commit_on_the_base_is_diffed_once(
    repo: Repo, tracing: object, span_exporter: InMemorySpanExporter
) -> None:
    """The common push, one commit on `base`: its own diff is the net one, so the guard reads
    it once (each `git diff` run is a span). Two commits: the net diff and each commit's."""
    repo.write({"src/a.py": "A = 1\n"})
    repo.commit("one")
    mirror = repo.mirror()
    span_exporter.clear()

    def diffs(head: str) -> int:
        span_exporter.clear()
        assert check_diff(mirror, repo.base, head, RepoConfig()) == []
        spans = span_exporter.get_finished_spans()
        return sum(1 for s in spans if (s.attributes or {}).get("git.subcommand") == "diff")

    one = repo.git("rev-parse", "HEAD")
    assert diffs(one) == 2  # --raw and --numstat, of the net change only
    repo.write({"src/b.py": "B = 1\n"})
    repo.commit("two")
    mirror = repo.mirror()
    assert diffs(repo.git("rev-parse", "HEAD")) == 6  # the net change, then each commit
