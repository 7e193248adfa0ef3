"""Review follow-ups end to end: a review of onloop's PR → suggestions applied byte for byte,
remarks answered (or addressed by the agent), one checked commit pushed as the PR's owner,
threads answered and resolved; `/agent apply`; reviews that must start nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete

from app.store.models import TERMINAL_STATES, Job, JobState, UserAccount
from app.web.oauth import resume_jobs
from app.web.state import onloop
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.model import Review
from tests.doubles.payloads import pull_request_review, pull_request_review_comment
from tests.doubles.webhooks import deliver
from tests.e2e import world as e2e
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
BRANCH = "onloop/issue-3"
BASE = b"def add(a, b):\n    return a+b\n\n\ndef sub(a, b):\n    return a-b\n"
HEAD = (
    b"def add(a, b):\r\n    return a+b  # sum\n\n\ndef sub(a, b):\n    return a-b  # difference\n"
)
CHECKS = "checks:\n  test: python3 -c 'import calc; assert calc.add(2, 3) == 5'\n"


def make_world(
    double: GitHubDouble, database_url: str, tmp_path: Path, **kw: Any
) -> Iterator[World]:
    """octo/widgets with alice's PR from onloop's branch `onloop/issue-3` changing calc.py;
    rita (write) reviews it, bob can only read."""
    files: dict[str, str | bytes] = {"calc.py": BASE, ".github/onloop.yml": CHECKS}
    for world in e2e.make_world(double, database_url, tmp_path, files, sandbox_pool_size=0, **kw):
        double.set_permission(REPO, "rita", "write")
        double.create_branch(REPO, BRANCH)
        double.commit(REPO, BRANCH, {"calc.py": HEAD}, message="Comment calc\n\nOnloop-Job: 1")
        double.create_pull(REPO, BRANCH, title="Comment calc", user="alice")
        world.authorize("alice")
        yield world


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(github_double, database_url, tmp_path)


def suggestion(*lines: str) -> str:
    """A suggestion block as GitHub's web editor sends it (CRLF line ends)."""
    return "How about:\r\n```suggestion\r\n" + "\r\n".join(lines) + "\r\n```\r\n"


def review(world: World, user: str, comments: list[dict[str, Any]], body: str = "") -> Review:
    return world.double.submit_review(REPO, 1, user, body=body, comments=comments)


def deliver_review(world: World, made: Review, **changes: Any) -> list[int]:
    payload = pull_request_review(world.double, REPO, made)
    payload["review"].update(changes)
    response = deliver(world.client, "pull_request_review", payload)
    assert response.status_code in (202, 204), response.get_data(as_text=True)
    return [int(i) for i in (response.get_json() or {}).get("jobs", [])]


def blob(world: World, rev: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "blob", f"{rev}:{path}"],
        cwd=world.double.git_dir(REPO),
        capture_output=True,
        check=True,
    ).stdout


def git_text(world: World, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=world.double.git_dir(REPO), capture_output=True, text=True, check=True
    )
    return done.stdout


def replies(world: World, comment_id: int) -> list[str]:
    return [r.body for r in world.double.review_replies.values() if r.root == comment_id]


def three_comments(world: World) -> tuple[Review, list[int]]:
    made = review(
        world,
        "rita",
        [
            {"path": "calc.py", "line": 2, "body": suggestion("    return a + b  # sum")},
            {"path": "calc.py", "line": 6, "body": suggestion("    return a - b", "")},
            {"path": "calc.py", "line": 5, "body": "Please give sub a docstring."},
        ],
    )
    return made, [int(c["id"]) for c in made.comments]


def test_suggestions_applied_remark_answered_as_the_pr_owner(world: World) -> None:
    old = world.double.branch_sha(REPO, BRANCH)
    made, (first, second, plain) = three_comments(world)
    (job_id,) = deliver_review(world, made)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert job.result["outcome"] == "pushed" and job.result["applied"] == 2
    new = world.double.branch_sha(REPO, BRANCH)
    assert new == job.result["new"] and new != old
    assert git_text(world, "rev-parse", f"{new}^").strip() == old  # one commit on the head
    message = git_text(world, "log", "-1", "--format=%B", new)
    assert message.startswith("Address review by @rita\n") and f"Onloop-Job: {job_id}" in message
    assert blob(world, new, "calc.py") == (
        b"def add(a, b):\r\n    return a + b  # sum\n\n\ndef sub(a, b):\n    return a - b\n\n"
    )
    (push,) = world.double.pushes
    assert (push.identity.kind, push.identity.login) == ("user", "alice")
    assert job.requested_by == "alice" and job.result["reviewer"] == "rita"
    assert "+    return a + b  # sum" in job.result["diff"]  # what the job page shows
    assert all(p.identity.login != "rita" for p in world.double.pushes)
    assert [len(replies(world, c)) for c in (first, second, plain)] == [1, 1, 1]
    assert f"Applied in {new[:7]}" in replies(world, first)[0]
    assert "needs a person or an agent" in replies(world, plain)[0]
    bot = world.double.app.bot_login
    assert {r.user for r in world.double.review_replies.values()} == {bot}
    assert world.double.thread_resolved_by(first) and world.double.thread_resolved_by(second)
    assert world.double.thread_resolved_by(plain) is None
    status = world.final_status(job_id)
    assert "@rita, in the name of @alice" in status.body


AGENT = (
    "grep -q 'docstring' TASK.md && "
    'sed -i \'s/^def sub(a, b):$/def sub(a, b):\\n    """a minus b"""/\' calc.py'
)
BREAKS = "sed -i 's/return a + b/return a * b/' calc.py"  # after the suggestion: add() breaks


@pytest.fixture(params=[AGENT, BREAKS], ids=["addresses", "breaks-the-checks"])
def agent_world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[World]:
    yield from make_world(
        github_double, database_url, tmp_path, agent="command", agent_command=request.param
    )


def test_with_an_agent_the_remark_is_addressed_and_a_broken_change_is_not_pushed(
    agent_world: World,
) -> None:
    world = agent_world
    breaks = "a * b" in world.settings.agent_command
    old = world.double.branch_sha(REPO, BRANCH)
    made, (first, _, plain) = three_comments(world)
    (job_id,) = deliver_review(world, made)
    job = world.wait(job_id)
    if breaks:
        assert job.state == JobState.FAILED, job.result
        assert job.result["outcome"] == "unvalidated"
        assert world.double.branch_sha(REPO, BRANCH) == old and not world.double.pushes
        assert world.double.thread_resolved_by(first) is None
        return
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    new = world.double.branch_sha(REPO, BRANCH)
    assert new is not None
    text = blob(world, new, "calc.py").decode()
    assert '    """a minus b"""' in text and "return a + b  # sum" in text
    assert "Changed in" in replies(world, plain)[0]
    assert world.double.thread_resolved_by(plain)


def test_agent_apply_applies_the_current_ones_and_lists_the_outdated(world: World) -> None:
    made = review(
        world,
        "rita",
        [
            {"path": "calc.py", "line": 2, "body": suggestion("    return a + b  # sum")},
            {"path": "calc.py", "line": 6, "body": suggestion("    return b - a")},
        ],
    )
    first, stale = (int(c["id"]) for c in made.comments)
    # alice changes line 6 herself: the second suggestion is outdated now
    later = HEAD.replace(b"a-b  # difference", b"a - b  # difference")
    world.double.commit(REPO, BRANCH, {"calc.py": later}, message="Spacing")
    world.authorize("rita")
    made_comment = world.double.reply_to_review_comment(REPO, 1, first, "rita", "/agent apply")
    payload = pull_request_review_comment(world.double, REPO, made_comment.id)
    response = deliver(world.client, "pull_request_review_comment", payload)
    assert response.status_code == 202, response.get_data(as_text=True)
    (job_id,) = response.get_json()["jobs"]
    job = world.wait(int(job_id))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert job.kind == "apply_suggestions" and job.result["applied"] == 1
    new = world.double.branch_sha(REPO, BRANCH)
    assert new is not None
    assert blob(world, new, "calc.py") == later.replace(b"a+b  # sum", b"a + b  # sum")
    (push,) = world.double.pushes
    assert push.identity.login == "rita"  # `/agent apply` is the commenter's own commit
    assert "Not applied: outdated" in replies(world, stale)[0]
    assert world.double.thread_resolved_by(first)
    assert world.double.thread_resolved_by(stale) is None
    assert "outdated" in world.final_status(int(job_id)).body


def test_reviews_that_start_nothing(world: World) -> None:
    comments = [{"path": "calc.py", "line": 2, "body": suggestion("    return 0")}]
    world.double.set_permission(REPO, "mallory", "read")
    by_outsider = review(world, "mallory", comments)
    assert deliver_review(world, by_outsider) == []  # no role: no job at all
    by_bot = review(world, world.double.app.bot_login, comments)
    assert deliver_review(world, by_bot) == []
    other = review(world, "dependabot[bot]", comments)
    assert deliver_review(world, other) == []
    # a collaborator who may only read: a job, refused at its policy step in silence
    world.double.set_permission(REPO, "bob", "read")
    by_reader = review(world, "bob", comments)
    (job_id,) = deliver_review(world, by_reader, author_association="COLLABORATOR")
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result.get("rule") == "trigger_permission"
    assert not world.double.pushes and not world.double.review_replies
    assert not world.bot_comments() and not world.containers()


def test_a_review_of_someone_else_s_pull_request_is_left_to_people(world: World) -> None:
    world.double.create_branch(REPO, "feature")
    world.double.commit(REPO, "feature", {"calc.py": HEAD}, message="Mine")
    pr = world.double.create_pull(REPO, "feature", title="Mine", user="alice")
    made = world.double.submit_review(
        REPO, pr.number, "rita", comments=[{"path": "calc.py", "line": 2, "body": "Hmm"}]
    )
    (job_id,) = deliver_review(world, made)
    job: Job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "not_onloop"
    assert not world.double.pushes and not world.double.review_replies
    assert not world.bot_comments(pr.number)


def test_without_the_owner_s_authorisation_it_asks_them_and_resumes(world: World) -> None:
    with world.db.transaction() as s:  # alice revoked onloop meanwhile
        s.execute(delete(UserAccount).where(UserAccount.login == "alice"))
    made, (first, _, _) = three_comments(world)
    (job_id,) = deliver_review(world, made)
    job = world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION, *TERMINAL_STATES))
    assert job.state == JobState.WAITING_FOR_AUTHORIZATION, (job.result, world.worker.output())
    (ask,) = world.bot_comments()
    assert "@alice" in ask.body and "/oauth/login" in ask.body and "@rita" not in ask.body
    assert not world.double.pushes and not world.double.review_replies
    world.authorize("alice")
    alice = world.double.user("alice")
    assert resume_jobs(onloop(world.app), alice.id, "alice") == [job_id]
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (push,) = world.double.pushes
    assert push.identity.login == "alice" and world.double.thread_resolved_by(first)
