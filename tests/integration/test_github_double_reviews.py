"""The double's check runs and reviews, driven by real PyGithub and plain HTTP: who may write
check runs, review comments checked against the diff, threads, replies, outdated threads after a
push, GraphQL thread listing and resolving, and the review webhook payloads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from github import GithubException

from tests.doubles import payloads
from tests.doubles.github import GitHubDouble
from tests.doubles.github.api import ApiError
from tests.doubles.github.handlers.review_threads import (
    NOT_IN_DIFF,
    START_NOT_BEFORE,
    START_OTHER_HUNK,
)
from tests.doubles.github.model import Review
from tests.integration.test_github_double import REPO, api, as_installation, as_user, git

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


# --- reviews by people, their threads, replies, outdated threads, GraphQL ---------------------
THREADS = """
query($owner: String!, $name: String!, $number: Int!, $cursor: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 2, after: $cursor) {
        nodes {
          id isResolved isOutdated path line startLine originalLine originalStartLine diffSide
          comments(first: 10) { nodes { id databaseId body author { login } createdAt } }
        }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}
"""
RESOLVE = """mutation Resolve($threadId: ID!) {
  resolveReviewThread(input: {threadId: $threadId}) { thread { id isResolved } }
}"""


def graphql(double: GitHubDouble, token: str, query: str, **variables: object) -> dict[str, Any]:
    answer = requests.post(
        double.url + "/api/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def all_threads(double: GitHubDouble, token: str) -> list[dict[str, Any]]:
    """Every review thread of PR 1, page by page as onloop reads them."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = graphql(double, token, THREADS, owner="octo", name="hello", number=1, cursor=cursor)
        threads = page["data"]["repository"]["pullRequest"]["reviewThreads"]
        out += threads["nodes"]
        if not threads["pageInfo"]["hasNextPage"]:
            return out
        cursor = threads["pageInfo"]["endCursor"]


def push(double: GitHubDouble, work: Path, token: str, text: str, **extra: str | None) -> str:
    """Clone (once) and push a commit to the PR's branch `edit` through the double's git."""
    env = double.git_env(token)
    if not work.exists():
        git("clone", "-q", "-b", "edit", double.clone_url(REPO), str(work), env=env)
    (work / "notes.txt").write_text(text)
    for path, content in extra.items():
        if content is None:
            (work / path).unlink()
        else:
            (work / path).write_text(content)
    git("add", "-A", cwd=work, env=env)
    git("commit", "-qm", "Address review", cwd=work, env=env)
    git("push", "-q", "origin", "HEAD:edit", cwd=work, env=env)
    return git("rev-parse", "HEAD", cwd=work, env=env).stdout.strip()


@pytest.fixture
def reviewed(double: GitHubDouble) -> tuple[GitHubDouble, Review]:
    """PR 1 (bob's) with gone.txt too, and alice's review: four threads."""
    double.commit(REPO, "edit", {"gone.txt": "a\nb\n"}, message="Add gone.txt")
    review = double.submit_review(
        REPO,
        1,
        "alice",
        "Please change these",
        "CHANGES_REQUESTED",
        [
            {"path": "notes.txt", "line": 2, "body": "A: rename"},
            {"path": "notes.txt", "start_line": 24, "line": 26, "body": "B: a range"},
            {"path": "notes.txt", "line": 28, "body": "C: below"},
            {"path": "gone.txt", "line": 1, "body": "D: drop this file"},
        ],
    )
    return double, review


def test_submitted_reviews_and_their_comments_over_rest(
    reviewed: tuple[GitHubDouble, Review],
) -> None:
    double, review = reviewed
    with pytest.raises(ApiError):  # off the diff, as create_review refuses it
        double.submit_review(
            REPO, 1, "carol", comments=[{"path": "notes.txt", "line": 15, "body": "x"}]
        )
    with pytest.raises(ApiError):  # nobody approves their own pull request
        double.submit_review(REPO, 1, "bob", state="APPROVED")
    approval = double.submit_review(REPO, 1, "carol", "LGTM", "APPROVED")
    pr = as_user(double, "bob").get_repo(REPO).get_pull(1)
    head = pr.head.sha
    assert [(v.id, v.user.login, v.state, v.body, v.commit_id) for v in pr.get_reviews()] == [
        (review.id, "alice", "CHANGES_REQUESTED", "Please change these", head),
        (approval.id, "carol", "APPROVED", "LGTM", head),
    ]
    listed = list(pr.get_single_review_comments(review.id))
    assert [(c.path, c.start_line, c.line, c.side, c.body[:2]) for c in listed] == [
        ("notes.txt", None, 2, "RIGHT", "A:"),
        ("notes.txt", 24, 26, "RIGHT", "B:"),
        ("notes.txt", None, 28, "RIGHT", "C:"),
        ("gone.txt", None, 1, "RIGHT", "D:"),
    ]
    assert not list(pr.get_single_review_comments(approval.id))
    a = pr.get_review_comment(listed[0].id)
    assert (a.pull_request_review_id, a.commit_id, a.original_commit_id) == (review.id, head, head)
    assert (a.original_line, a.position, a.in_reply_to_id) == (2, 3, None)  # below the @@
    assert a.diff_hunk == "@@ -1,5 +1,5 @@\n line 1\n-line 2\n+line two"
    raw = api(double, "GET", f"/repos/{REPO}/pulls/1/comments", double.issue_user_token("bob"))
    assert "in_reply_to_id" not in raw.json()[0]  # GitHub leaves it out of a thread's start
    for field in ("node_id", "original_start_line", "original_position", "user", "_links"):
        assert field in raw.json()[1], field
    assert raw.json()[1]["original_start_line"] == 24


def test_replies_join_the_thread(reviewed: tuple[GitHubDouble, Review]) -> None:
    double, review = reviewed
    first = review.comments[0]["id"]
    helper = double.reply_to_review_comment(REPO, 1, first, "alice", "also line 3?")
    pr = as_user(double, "bob").get_repo(REPO).get_pull(1)
    reply = pr.create_review_comment_reply(helper.id, "Done in the next push")
    assert (reply.in_reply_to_id, reply.path, reply.line, reply.user.login) == (
        first,
        "notes.txt",
        2,
        "bob",
    )  # a reply to a reply is a reply in the same thread
    assert reply.pull_request_review_id not in (review.id, helper.review_id)
    thread = [c for c in pr.get_review_comments() if c.id == first or c.in_reply_to_id == first]
    assert [(c.user.login, c.body) for c in thread] == [
        ("alice", "A: rename"),
        ("alice", "also line 3?"),
        ("bob", "Done in the next push"),
    ]
    outsider = double.issue_installation_token(
        next(iter(double.installations)), permissions={"pull_requests": "read"}
    ).value
    refused = api(
        double,
        "POST",
        f"/repos/{REPO}/pulls/1/comments/{first}/replies",
        outsider,
        json={"body": "no"},
    )
    assert refused.status_code == 403
    missing = api(
        double,
        "POST",
        f"/repos/{REPO}/pulls/1/comments/999999/replies",
        double.issue_user_token("bob"),
        json={"body": "no"},
    )
    assert missing.status_code == 404


def test_threads_go_outdated_only_when_their_lines_change(
    reviewed: tuple[GitHubDouble, Review], tmp_path: Path
) -> None:
    double, _ = reviewed
    first_head = double.branch_sha(REPO, "edit")
    double.set_permission(REPO, "bob", "write")
    token = double.issue_user_token("bob")
    pr = as_user(double, "bob").get_repo(REPO).get_pull(1)
    shifted = "line 0\n" + HEAD  # a line above every thread: they move, none is outdated
    head = push(double, tmp_path / "work", token, shifted)
    assert [
        (c.line, c.start_line, c.original_line, c.commit_id) for c in pr.get_review_comments()
    ] == [
        (3, None, 2, head),
        (27, 25, 26, head),
        (29, None, 28, head),
        (1, None, 1, head),
    ]
    head = push(
        double, tmp_path / "work", token, shifted.replace("25.5", "25.75"), **{"gone.txt": None}
    )
    comments = list(pr.get_review_comments())
    assert [(c.line, c.start_line, c.original_line, c.original_start_line) for c in comments] == [
        (3, None, 2, None),
        (None, None, 26, 24),  # its lines changed
        (29, None, 28, None),
        (None, None, 1, None),  # its file is gone
    ]
    assert [c.position is None for c in comments] == [False, True, False, True]
    assert [c.commit_id for c in comments] == [head, first_head, head, first_head]
    assert {c.original_commit_id for c in comments} == {first_head}
    nodes = all_threads(double, token)
    assert [(n["isOutdated"], n["line"], n["originalLine"]) for n in nodes] == [
        (False, 3, 2),
        (True, None, 26),
        (False, 29, 28),
        (True, None, 1),
    ]


def test_graphql_lists_threads_page_by_page(reviewed: tuple[GitHubDouble, Review]) -> None:
    double, review = reviewed
    double.reply_to_review_comment(REPO, 1, review.comments[1]["id"], "onloop[bot]", "Applied")
    _, token = as_installation(double)
    nodes = all_threads(double, token)
    assert len(double.graphql_calls("reviewThreads")) == 2  # 4 threads, 2 a page
    assert [
        (n["path"], n["startLine"], n["line"], n["diffSide"], n["isResolved"]) for n in nodes
    ] == [
        ("notes.txt", None, 2, "RIGHT", False),
        ("notes.txt", 24, 26, "RIGHT", False),
        ("notes.txt", None, 28, "RIGHT", False),
        ("gone.txt", None, 1, "RIGHT", False),
    ]
    assert nodes[0]["id"] == double.thread_id(review.comments[0]["id"])
    comments = nodes[1]["comments"]["nodes"]
    assert [(c["databaseId"], c["author"]["login"], c["body"]) for c in comments] == [
        (review.comments[1]["id"], "alice", "B: a range"),
        (comments[1]["databaseId"], "onloop", "Applied"),  # GraphQL drops a bot's "[bot]"
    ]
    assert set(comments[0]) == {"id", "databaseId", "body", "author", "createdAt"}
    unknown = graphql(
        double,
        token,
        "mutation { addPullRequestReviewThreadReply(input: {}) { clientMutationId } }",
    )
    assert "data" not in unknown
    assert "addPullRequestReviewThreadReply" in unknown["errors"][0]["message"]
    missing = graphql(double, token, THREADS, owner="octo", name="nope", number=1)
    assert missing["data"] == {"repository": None}
    assert missing["errors"][0]["type"] == "NOT_FOUND"


def test_resolving_needs_write_access_or_authorship(reviewed: tuple[GitHubDouble, Review]) -> None:
    double, review = reviewed
    ids = [double.thread_id(c["id"]) for c in review.comments]
    carol = double.issue_user_token("carol")  # may read this public repo, nothing more
    refused = graphql(double, carol, RESOLVE, threadId=ids[0])
    assert refused["data"] == {"resolveReviewThread": None}
    assert refused["errors"][0]["type"] == "FORBIDDEN"
    assert double.thread_resolved_by(review.comments[0]["id"]) is None
    for who, thread in (("bob", ids[0]), ("alice", ids[1])):  # the author; a writer
        done = graphql(double, double.issue_user_token(who), RESOLVE, threadId=thread)
        assert done == {
            "data": {"resolveReviewThread": {"thread": {"id": thread, "isResolved": True}}}
        }
    _, token = as_installation(double)
    graphql(double, token, RESOLVE, threadId=ids[2])
    assert [double.thread_resolved_by(c["id"]) for c in review.comments] == [
        "bob",
        "alice",
        "onloop[bot]",
        None,
    ]
    assert [
        (c.identity.login, c.json["variables"]["threadId"])
        for c in double.graphql_calls("resolveReviewThread")
    ] == [
        ("carol", ids[0]),
        ("bob", ids[0]),
        ("alice", ids[1]),
        ("onloop[bot]", ids[2]),
    ]
    assert [n["isResolved"] for n in all_threads(double, carol)] == [True, True, True, False]
    bad = graphql(double, token, RESOLVE, threadId="nonsense")
    assert bad["errors"][0]["type"] == "NOT_FOUND"


def test_review_webhook_payloads(reviewed: tuple[GitHubDouble, Review]) -> None:
    double, review = reviewed
    data = payloads.pull_request_review(double, REPO, review)
    assert data["action"] == "submitted" and data["sender"]["login"] == "alice"
    assert data["review"]["state"] == "changes_requested"  # lower case, unlike REST
    assert data["review"]["commit_id"] == double.branch_sha(REPO, "edit")
    assert data["pull_request"]["number"] == 1 and data["pull_request"]["user"]["login"] == "bob"
    assert data["installation"]["id"] == double.installation_for(double.repo(REPO)).id  # type: ignore[union-attr]
    for field in ("id", "node_id", "body", "submitted_at", "html_url", "user"):
        assert field in data["review"], field
    reply = double.reply_to_review_comment(
        REPO, 1, review.comments[1]["id"], "alice", "/agent fix it"
    )
    comment = payloads.pull_request_review_comment(double, REPO, reply.id)
    assert comment["action"] == "created" and comment["sender"]["login"] == "alice"
    assert comment["comment"]["in_reply_to_id"] == review.comments[1]["id"]
    assert (
        comment["comment"]["path"],
        comment["comment"]["start_line"],
        comment["comment"]["line"],
    ) == (
        "notes.txt",
        24,
        26,
    )


def test_graphql_reads_aliases_literals_and_refuses_what_it_cannot(
    reviewed: tuple[GitHubDouble, Review],
) -> None:
    double, review = reviewed
    token = double.issue_user_token("alice")
    query = """
    # literals instead of variables, an alias, __typename
    query Threads { repository(owner: "octo", name: "hello") {
      pr: pullRequest(number: 1) { __typename
        reviewThreads(first: 1) { totalCount edges { cursor node { isOutdated } } } } } }
    """
    pr = graphql(double, token, query)["data"]["repository"]["pr"]
    assert pr["__typename"] == "PullRequest" and pr["reviewThreads"]["totalCount"] == 4
    assert [e["node"] for e in pr["reviewThreads"]["edges"]] == [{"isOutdated": False}]
    too_many = graphql(double, token, query.replace("first: 1", "first: 101"))
    assert too_many["errors"][0]["type"] == "EXCESSIVE_PAGINATION"
    assert too_many["data"]["repository"]["pr"]["reviewThreads"] is None
    unbounded = graphql(double, token, query.replace("(first: 1)", ""))
    assert unbounded["errors"][0]["type"] == "MISSING_PAGINATION_BOUNDARIES"
    fragment = graphql(double, token, "query { viewer { ...F } } fragment F on User { login }")
    assert "fragments" in fragment["errors"][0]["message"] and "data" not in fragment
    thread = double.thread_id(review.comments[0]["id"])
    graphql(double, token, RESOLVE, threadId=thread)
    undo = graphql(
        double,
        token,
        "mutation($t: ID!) { unresolveReviewThread(input: {threadId: $t})"
        " { thread { isResolved } } }",
        t=thread,
    )
    assert undo == {"data": {"unresolveReviewThread": {"thread": {"isResolved": False}}}}
    assert double.thread_resolved_by(review.comments[0]["id"]) is None
    anonymous = requests.post(double.url + "/api/graphql", json={"query": query}, timeout=10)
    assert anonymous.status_code == 401
