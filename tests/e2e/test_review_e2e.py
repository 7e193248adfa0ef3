"""`/agent review` end to end: webhook → worker → Docker sandbox (ruff) → one review through the
GitHub double with the commenter's token, its comments on changed lines, its suggestions
leaving ruff clean."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tasks.review.diff import apply_suggestions, suggestions_in
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.review_threads import pull_diff, split
from tests.doubles.github.model import Review
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(github_double, database_url, tmp_path)


@pytest.fixture
def opted_in_world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> Iterator[World]:
    """The organisation lets repositories opt in to REQUEST_CHANGES (the built-in ceiling
    does not)."""
    org = tmp_path / "org.yml"
    org.write_text("review:\n  request_changes: true\n")
    yield from make_world(github_double, database_url, tmp_path, config_file=org)


PYPROJECT = '[project]\nname = "widgets"\nversion = "0"\n\n[tool.ruff]\nline-length = 100\n'
BASE = '"""Widgets."""\n\nimport json\n\n\ndef count() -> int:\n    return 1\n'
HEAD = '''"""Widgets."""

import json
import os
import sys


def count() -> int:
    return 1


def spin(n):
    items=[n,n+1,
      n+2]
    return sys.argv[n]+items
def last():
    return undefined_thing
'''


def pull_request(world: World, user: str = "alice") -> int:
    double = world.double
    double.commit(REPO, "main", {"pyproject.toml": PYPROJECT, "widgets.py": BASE})
    double.create_branch(REPO, "spin")
    double.commit(REPO, "spin", {"widgets.py": HEAD}, message="Spin widgets")
    return double.create_pull(REPO, "spin", title="Spin", user=user).number


def reviews(world: World, number: int) -> list[Review]:
    return [v for v in world.double.reviews.values() if v.number == number]


def changed_lines(world: World, number: int) -> dict[str, set[int]]:
    """Added lines per file of the PR's diff, read by the double itself."""
    from tests.doubles.github.api import Ctx

    repo = world.double.repo(REPO)
    ctx = Ctx(world.double, "GET", "/", {}, {}, b"", world.double.url)
    text = pull_diff(ctx, repo, world.double.issue(REPO, number))
    out: dict[str, set[int]] = {}
    for f in split(text):
        new = out.setdefault(f.path, set())
        line = 0
        for row in f.patch_lines:
            if row.startswith("@@"):
                line = int(row.split("+")[1].split(",")[0].split(" ")[0])
            elif row.startswith("+"):
                new.add(line)
                line += 1
            elif not row.startswith("-"):
                line += 1
    return out


def test_review_comments_sit_on_changed_lines_and_suggestions_leave_ruff_clean(
    world: World, tmp_path: Path
) -> None:
    number = pull_request(world)
    world.authorize("alice")
    job = world.wait(world.comment("/agent review", "alice", number))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert [s["name"] for s in job.steps] == [
        "policy",
        "authorization",
        "diff",
        "sandbox",
        "lint",
        "fixers",
        "review",
    ]
    (review,) = reviews(world, number)
    assert (review.user, review.event) == ("alice", "COMMENT")
    assert review.commit_id == world.double.branch_sha(REPO, "spin")
    assert f"<!-- onloop:review:{review.commit_id} -->" in review.body
    changed = changed_lines(world, number)
    assert review.comments, review.body
    for c in review.comments:
        first = c.get("start_line") or c["line"]
        assert c["side"] == "RIGHT" and c["path"] == "widgets.py"
        assert all(n in changed["widgets.py"] for n in range(first, c["line"] + 1)), c
    bodies = "\n".join(c["body"] for c in review.comments)
    assert "`F401`" in bodies and "`os` imported but unused" in bodies
    assert "`F821`" in bodies  # no fix: said, not suggested
    assert "`json` imported but unused" not in bodies  # an unchanged line: left alone
    assert job.result["comments"] == len(review.comments) and job.result["suggestions"] >= 2

    # Commit every suggestion as GitHub does; ruff then has nothing to say but the F821.
    head = subprocess.run(
        [
            "git",
            "--git-dir",
            str(world.double.git_dir(REPO)),
            "show",
            f"{review.commit_id}:widgets.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    edits = []
    for c in review.comments:
        for lines in suggestions_in(c["body"]):
            edits.append((c.get("start_line") or c["line"], c["line"], lines))
    fixed = apply_suggestions(head, edits)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "widgets.py").write_text(fixed)
    fmt = subprocess.run(["ruff", "format", "--check", "--no-cache", "widgets.py"], cwd=tmp_path)
    assert fmt.returncode == 0, fixed
    lint = subprocess.run(
        ["ruff", "check", "--no-cache", "--output-format", "concise", "widgets.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    problems = [line for line in lint.stdout.splitlines() if line.startswith("widgets.py:")]
    assert len(problems) == 2 and all("F" in p for p in problems), lint.stdout
    assert all("F821" in p or ("F401" in p and "json" in p) for p in problems), lint.stdout


def test_asking_again_on_the_same_head_posts_nothing_new(world: World) -> None:
    number = pull_request(world)
    world.authorize("alice")
    first = world.wait(world.comment("/agent review", "alice", number))
    assert first.state == JobState.SUCCEEDED, (first.result, world.worker.output())
    again = world.wait(world.comment("/agent review", "alice", number))
    assert again.state == JobState.SUCCEEDED, (again.result, world.worker.output())
    (review,) = reviews(world, number)
    assert again.result["already"] and again.result["review_id"] == review.id
    assert [s["name"] for s in again.steps][-1] == "review"
    assert "already reviewed" in again.steps[-1]["output"]


def test_request_changes_only_where_the_repository_allows_it(opted_in_world: World) -> None:
    world = opted_in_world
    world.double.commit(REPO, "main", {".github/onloop.yml": "review:\n  request_changes: true\n"})
    number = pull_request(world, user="bob")
    world.authorize("carol")
    job = world.wait(world.comment("/agent review", "carol", number))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (review,) = reviews(world, number)
    assert (review.user, review.event) == ("carol", "REQUEST_CHANGES")


def test_a_clean_pull_request_gets_a_short_review(world: World) -> None:
    world.double.commit(REPO, "main", {"pyproject.toml": PYPROJECT, "widgets.py": BASE})
    world.double.create_branch(REPO, "tidy")
    world.double.commit(REPO, "tidy", {"more.py": '"""More."""\n\nVALUE = 2\n'})
    number = world.double.create_pull(REPO, "tidy", title="Tidy", user="alice").number
    world.authorize("alice")
    job = world.wait(world.comment("/agent review", "alice", number))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (review,) = reviews(world, number)
    assert review.event == "COMMENT" and not review.comments
    assert "found nothing to remark" in review.body and "`ruff check`: 0 findings" in review.body
    assert job.result["conclusion"] == "success"
