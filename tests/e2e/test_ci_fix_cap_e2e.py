"""The CI-fix cap end to end (webhook → worker → Docker → pushes to the GitHub double): after
`max_ci_fix_attempts` automatic fixes, red runs end quietly before any sandbox, one stop
comment stays the only one, and a person's push starts the count again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import audit
from app.store.models import Job, JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.payloads import check_suite_failed, workflow_run_failed
from tests.e2e.test_fix_e2e import failing_run, make_world
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# Every attempt changes something, so each one that runs pushes a fix commit.
AGENT = "date +%s%N >> attempts.txt"
STOPPED = "stopped fixing CI here"


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(
        github_double, database_url, tmp_path, agent="command", agent_command=AGENT
    )


def red(world: World, event: str = "workflow_run") -> Job:
    """CI fails on the PR's head as it is now; the finished job it started."""
    run = failing_run(world)
    build = workflow_run_failed if event == "workflow_run" else check_suite_failed
    (job_id,) = world.deliver(event, build(world.double, REPO, run, 1))
    return world.wait(job_id)


def fixed(world: World, job: Job) -> str:
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert job.result["outcome"] == "pushed", job.result
    head = world.double.branch_sha(REPO, "feature")
    assert head is not None
    return head


def test_two_fixes_then_red_runs_end_quietly_with_one_stop_comment(world: World) -> None:
    world.authorize("alice")
    first, second = fixed(world, red(world)), fixed(world, red(world))
    assert len(world.double.pushes) == 2
    stopped = [red(world), red(world), red(world, "check_suite")]  # the same head, red again
    assert world.double.branch_sha(REPO, "feature") == second != first
    assert len(world.double.pushes) == 2
    for job in stopped:
        result = job.result
        assert (job.state, result["outcome"], result["rule"]) == (
            JobState.FAILED,
            "stopped",
            "max_ci_fix_attempts",
        ), result
        assert result["quiet"] is True and result["attempts"] == 2, result
        assert [s["name"] for s in job.steps] == ["policy"], job.steps  # no work, no sandbox
        assert not audit.entries(world.db, job_id=job.id, action=audit.SANDBOX_EXEC)

    # A person pushes a new head, and it fails too: onloop fixes it again.
    world.double.commit(REPO, "feature", {"more.py": "X = 1\n"}, message="More work")
    again = red(world)
    third = fixed(world, again)
    assert len(world.double.pushes) == 3 and third != second
    world.final_status(again.id)  # every earlier job's listeners are done by now

    (stop,) = [c for c in world.bot_comments() if STOPPED in c.body]
    assert "2 automatic fix attempt(s)" in stop.body
    assert not world.edits(stop)  # said once, never rewritten by the later refusals
    said = [c.body for c in world.bot_comments() if "stopped" in c.body.lower()]
    assert said == [stop.body], said  # no status comment says `stopped` besides it
    for job in stopped:
        assert not [c for c in world.bot_comments() if f"onloop:job-{job.id}-" in c.body]
        runs = world.double.checks.for_commit(REPO, second)
        assert not [r for r in runs if r.external_id == str(job.id)]
