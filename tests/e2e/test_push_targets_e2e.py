"""Pushes go only where onloop may write, end to end: a pull request whose head is the default
branch, or a branch that protection or a ruleset guards, never gets onloop's push; a CI fix
goes to an `onloop/*` branch with a pull request into that head instead, and a rebase is
refused. Webhook → worker → Docker sandbox → the GitHub double's git, with real protection."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.actions import add_run
from tests.doubles.payloads import issue_labeled, workflow_run_failed
from tests.e2e import world as e2e
from tests.e2e.test_fix_e2e import AGENT, BAD, PYPROJECT, RUFF_LOG
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FORK = "dave/widgets"


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    """`octo/widgets` with `release` cut from `main` (and moved on since), `main` then broken
    by bad.py, and alice's pull request #1 from `main` into `release` (a release PR)."""
    files: dict[str, str | bytes] = {"pyproject.toml": PYPROJECT, "README.md": "widgets\n"}
    for world in e2e.make_world(github_double, database_url, tmp_path, files, sandbox_pool_size=0):
        double = world.double
        double.create_branch(REPO, "release")
        double.commit(REPO, "release", {"CHANGES.md": "1.0\n"}, message="Release notes")
        double.commit(REPO, "main", {"bad.py": BAD}, message="Add bad.py")
        double.create_pull(REPO, "main", base="release", title="Release", user="alice")
        yield world


def feature_pull(world: World) -> int:
    """alice's pull request from `feature` (one commit) into `main`, which then moves on."""
    double = world.double
    double.create_branch(REPO, "feature")
    double.commit(REPO, "feature", {"feature.py": "F = 1\n"}, message="Add feature")
    number = double.create_pull(REPO, "feature", title="Feature", user="alice").number
    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    return number


def test_a_ci_fix_for_a_pr_from_the_default_branch_opens_a_pr_into_it(world: World) -> None:
    world.authorize("alice")
    main = world.double.branch_sha(REPO, "main")
    assert main is not None
    run = add_run(world.double, REPO, main, "main", [("lint", "failure", RUFF_LOG)])
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(world.double, REPO, run, 1))
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert world.double.branch_sha(REPO, "main") == main  # no commit landed on main
    branch = f"onloop/fix-ci-1-{job_id}"
    (push,) = world.double.pushes
    assert [u.ref for u in push.updates] == [f"refs/heads/{branch}"]
    assert push.identity.login == "alice"
    fix = world.double.issue(REPO, job.result["pr"])
    assert fix.pull is not None and fix.user == "alice"
    assert (fix.pull.head_ref, fix.pull.base_ref) == (branch, "main")
    (said,) = [c for c in world.double.comments(REPO, 1) if c.user == "alice"]
    assert "`main` is the default branch" in said.body and f"#{fix.number}" in said.body


def test_a_rebase_of_a_pr_from_the_default_branch_is_refused(world: World) -> None:
    world.authorize("alice")
    main = world.double.branch_sha(REPO, "main")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.FAILED and job.result["outcome"] == "default_branch", job.result
    assert world.double.branch_sha(REPO, "main") == main and not world.double.pushes
    assert "rebase" not in [s["name"] for s in job.steps]  # refused before any work
    status = world.final_status(job.id)
    assert "`main` is the default branch" in status.body


@pytest.mark.parametrize(
    ("guard", "outcome"),
    [("protection", "protected"), ("ruleset", "ruleset")],
)
def test_a_rebase_of_a_guarded_head_is_refused(world: World, guard: str, outcome: str) -> None:
    world.authorize("alice")
    number = feature_pull(world)
    if guard == "protection":
        world.double.protections.protect(REPO, "feature")
    else:
        world.double.protections.add_ruleset(REPO, ["feat*"], ["non_fast_forward"])
    head = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.FAILED and job.result["outcome"] == outcome, job.result
    assert world.double.branch_sha(REPO, "feature") == head and not world.double.pushes
    assert "rebase" not in [s["name"] for s in job.steps]
    said = "is protected" if guard == "protection" else "ruleset (non_fast_forward)"
    assert said in world.final_status(job.id, number).body


def test_a_normal_pr_is_still_rebased_and_pushed(world: World) -> None:
    world.authorize("alice")
    number = feature_pull(world)
    old = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "pushed", job.result
    (push,) = world.double.pushes  # with the old head's backup ref, in one atomic push
    backup = f"refs/onloop/backup/feature/{job.id}"
    assert [(u.ref, u.old) for u in push.updates] == [("refs/heads/feature", old), (backup, None)]


def test_a_rebase_of_a_forks_default_branch_is_refused(world: World) -> None:
    world.authorize("alice")
    world.double.create_repo(FORK, fork_of=REPO)
    world.double.commit(FORK, "main", {"patch.py": "P = 1\n"}, message="Add patch")
    number = world.double.create_pull(
        REPO, "dave:main", user="dave", maintainer_can_modify=True
    ).number
    world.double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    head = world.double.branch_sha(FORK, "main")
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.FAILED and job.result["outcome"] == "default_branch", job.result
    assert world.double.branch_sha(FORK, "main") == head and not world.double.pushes
    assert f"default branch of {FORK}" in world.final_status(job.id, number).body


@pytest.fixture
def agent_world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    files: dict[str, str | bytes] = {"README.md": "teh widgets\n"}
    yield from e2e.make_world(
        github_double,
        database_url,
        tmp_path,
        files,
        sandbox_pool_size=0,
        agent="command",
        agent_command=AGENT,
    )


def test_a_push_github_refuses_as_protected_says_so(agent_world: World) -> None:
    # Protection the API cannot show yet (the branch does not exist): GitHub's push says it.
    world = agent_world
    world.authorize("carol")
    issue = world.double.create_issue(REPO, "Typo in README", "It says teh.", user="alice")
    world.double.protections.protect(REPO, f"onloop/issue-{issue.number}")
    (job_id,) = world.deliver(
        "issues", issue_labeled(world.double, REPO, issue.number, user="carol")
    )
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["outcome"] == "protected", job.result
    assert "as a protected branch" in job.result["error"] and not world.double.pushes
