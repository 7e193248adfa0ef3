"""A rebase whose conflicts the scripted command agent resolves: its hunks, how each was settled
and the checks that ran after are in the status comment; when the checks fail, nothing is pushed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.markdown import code_blocks, outside_code
from tests.e2e.test_rebase_e2e import REPO, World, authorize, git, open_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# The agent keeps the pull request's side of the one conflict (main says A = 2).
KEEP_PR = "printf 'A = 5\\n' > lib.py; echo kept the pull request side"
PASSING = "checks:\n  fix: []\n  test: grep -qx 'A = 5' lib.py\n"
FAILING = "checks:\n  fix: []\n  test: grep -qx 'A = 2' lib.py\n"


# An agent that commits the resolution itself, moving the rebase on its own.
COMMITS = f"{KEEP_PR}; git add lib.py; git -c user.name=a -c user.email=a@a.test commit -qm own"


@pytest.fixture
def agent_world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[World]:
    """`world` with the scripted command agent (KEEP_PR, or the indirect parameter) and a
    commit on `feature` that conflicts with main's."""
    command = getattr(request, "param", None) or KEEP_PR
    with open_world(
        github_double, database_url, tmp_path, agent="command", agent_command=command
    ) as world:
        authorize(world.db, world.double, "alice")
        world.double.commit(REPO, "feature", {"lib.py": "A = 5\n"}, message="Clash")
        yield world


def test_a_conflict_resolved_by_the_agent_is_listed_with_its_checks(agent_world: World) -> None:
    world = agent_world
    world.double.commit(REPO, "main", {".github/onloop.yml": PASSING}, message="Checks")
    old = world.double.branch_sha(REPO, "feature")
    clash = str(old)  # the commit the rebase stopped on
    job_id = world.comment("/agent rebase", "alice")
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert job.result["outcome"] == "pushed" and job.result["hunks"] == [["lib.py", 1, "PR"]]
    assert job.result["checks"] == {"grep -qx 'A = 5' lib.py": 0}
    new = world.double.branch_sha(REPO, "feature")
    assert git(world.double, "show", f"{new}:lib.py") == "A = 5"
    assert git(world.double, "rev-parse", f"refs/onloop/backup/feature/{job_id}") == old
    (result,) = world.user_comments("alice")
    assert f"`lib.py` line 1, replaying `{clash[:12]}`: kept the pull request's side" in result.body
    assert "<<<<<<< base\nA = 2\n=======\nA = 5\n>>>>>>> pull request\n" in code_blocks(result.body)
    assert "- ✓ `grep -qx 'A = 5' lib.py` (exit 0)" in result.body
    assert "<summary>git range-diff" in outside_code(result.body)


def test_a_resolution_that_fails_the_checks_pushes_nothing(agent_world: World) -> None:
    world = agent_world
    world.double.commit(REPO, "main", {".github/onloop.yml": FAILING}, message="Checks")
    old = world.double.branch_sha(REPO, "feature")
    job_id = world.comment("/agent rebase", "alice")
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["outcome"] == "unresolved", job.result
    assert job.result["hunks"] == [["lib.py", 1, "PR"]], job.result
    assert world.double.branch_sha(REPO, "feature") == old and not world.double.pushes
    backup = f"refs/onloop/backup/feature/{job_id}"
    assert git(world.double, "rev-parse", "--verify", "-q", backup).startswith("!")
    (result,) = world.user_comments("alice")
    assert "did not pass the checks; nothing was pushed" in result.body
    assert (
        "`lib.py` line 1" in result.body and "- ✗ `grep -qx 'A = 2' lib.py` (exit 1)" in result.body
    )


@pytest.mark.parametrize("agent_world", [COMMITS], indirect=True)
def test_an_agent_that_moves_the_rebase_itself_pushes_nothing(agent_world: World) -> None:
    world = agent_world
    world.double.commit(REPO, "main", {".github/onloop.yml": PASSING}, message="Checks")
    old = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.FAILED and job.result["outcome"] == "unresolved", job.result
    assert world.double.branch_sha(REPO, "feature") == old and not world.double.pushes
    (result,) = world.user_comments("alice")
    assert "the agent moved the rebase itself" in result.body and "`lib.py` line 1" in result.body
