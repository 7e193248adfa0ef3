"""The double's check runs and review threads, driven by real PyGithub: who may write check
runs, how they move, and review comments checked against the pull request's diff."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from github import GithubException

from tests.doubles.github import GitHubDouble
from tests.doubles.github.handlers.review_threads import (
    NOT_IN_DIFF,
    START_NOT_BEFORE,
    START_OTHER_HUNK,
)
from tests.integration.test_github_double import REPO, as_installation, as_user

BASE = "".join(f"line {n}\n" for n in range(1, 31))
HEAD = BASE.replace("line 2\n", "line two\n").replace("line 25\n", "line 25\nline 25.5\n")


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo(REPO, files={"notes.txt": BASE})
    github_double.create_branch(REPO, "edit")
    github_double.commit(REPO, "edit", {"notes.txt": HEAD}, message="Edit")
    github_double.commit(REPO, "main", {"other.txt": "main moved\n"}, message="Move main")
    github_double.create_pull(REPO, "edit", user="bob")
    github_double.set_permission(REPO, "alice", "write")
    return github_double


def test_only_an_installation_writes_check_runs_and_they_move_to_completed(
    double: GitHubDouble,
) -> None:
    sha = double.branch_sha(REPO, "edit")
    assert sha is not None
    with pytest.raises(GithubException) as err:
        as_user(double, "alice").get_repo(REPO).create_check_run("onloop/x", sha)
    assert err.value.status == 403 and err.value.data["message"] == (
        "You must authenticate via a GitHub App."
    )
    repo = as_installation(double)[0].get_repo(REPO)
    run = repo.create_check_run(
        "onloop/x",
        sha,
        status="in_progress",
        started_at=datetime.now(UTC),
        external_id="7",
        output={"title": "Running", "summary": "step 1"},
    )
    assert (run.status, run.conclusion, run.external_id) == ("in_progress", None, "7")
    with pytest.raises(GithubException) as err:
        run.edit(status="completed")
    assert err.value.status == 422  # completed needs a conclusion
    run.edit(conclusion="neutral", output={"title": "Done", "summary": "2 comments"})
    (listed,) = repo.get_commit(sha).get_check_runs(check_name="onloop/x")
    assert (listed.id, listed.status, listed.conclusion) == (run.id, "completed", "neutral")
    assert listed.output.title == "Done" and listed.app.slug == double.app.slug
    assert [h[:2] for h in double.checks.runs[run.id].history] == [
        ("in_progress", None),
        ("completed", "neutral"),
    ]
    assert not list(repo.get_commit(sha).get_check_runs(check_name="other"))


def test_review_comments_must_be_on_the_diff(double: GitHubDouble) -> None:
    pr = as_user(double, "alice").get_repo(REPO).get_pull(1)
    assert [(f.filename, f.additions, f.deletions) for f in pr.get_files()] == [
        ("notes.txt", 2, 1)
    ]  # main's own change is not part of it: merge base to head
    for bad, message in (
        ({"line": 15}, NOT_IN_DIFF),  # between the two hunks
        ({"line": 26, "start_line": 3}, START_OTHER_HUNK),
        ({"line": 3, "start_line": 4}, START_NOT_BEFORE),
    ):
        with pytest.raises(GithubException) as err:
            pr.create_review(
                event="COMMENT",
                body="x",
                comments=[{"path": "notes.txt", "body": "no", **bad}],  # type: ignore[typeddict-item]
            )
        assert err.value.status == 422 and err.value.data["errors"] == [message], bad
    review = pr.create_review(
        event="COMMENT",
        body="ok",
        comments=[
            {"path": "notes.txt", "line": 2, "side": "RIGHT", "body": "context and change"},
            {"path": "notes.txt", "line": 26, "start_line": 24, "body": "a range in one hunk"},
            {"path": "notes.txt", "line": 2, "side": "LEFT", "body": "the old line"},
        ],
    )
    listed = list(pr.get_review_comments())
    assert [(c.path, c.line, c.start_line, c.side) for c in listed] == [
        ("notes.txt", 2, None, "RIGHT"),
        ("notes.txt", 26, 24, "RIGHT"),
        ("notes.txt", 2, None, "LEFT"),
    ]
    assert {c.pull_request_review_id for c in listed} == {review.id}


def test_nobody_requests_changes_on_their_own_pull_request(double: GitHubDouble) -> None:
    double.set_permission(REPO, "bob", "write")
    with pytest.raises(GithubException) as err:
        as_user(double, "bob").get_repo(REPO).get_pull(1).create_review(
            event="REQUEST_CHANGES", body="hmm"
        )
    assert err.value.status == 422
    review = (
        as_user(double, "alice")
        .get_repo(REPO)
        .get_pull(1)
        .create_review(event="REQUEST_CHANGES", body="please fix")
    )
    assert review.state == "CHANGES_REQUESTED"
