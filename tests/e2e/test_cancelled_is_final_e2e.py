"""Cancelled means final: a rebase cancelled while its push is being prepared pushes nothing,
as `JobContext.before_write` reads the job's state under its lease right before the push. A
real `onloop worker`, Docker, a private Redis and the GitHub double, which holds the push
step's branch read long enough for `/agent cancel` to land."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.e2e import world as e2e
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
HOLD = 10.0  # seconds the double holds each read of the head's rules


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    files: dict[str, str | bytes] = {"README.md": "widgets\n", "lib.py": "A = 1\n"}
    for world in e2e.make_world(github_double, database_url, tmp_path, files):
        double = github_double
        double.create_branch(REPO, "feature")
        double.commit(REPO, "feature", {"feature.py": "F = 1\n"}, message="Add feature")
        double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
        double.create_pull(REPO, "feature", title="Feature", user="alice")
        yield world


def test_a_rebase_cancelled_while_its_push_is_prepared_pushes_nothing(world: World) -> None:
    double = world.double
    world.authorize("alice")
    head = double.branch_sha(REPO, "feature")
    # Where the head may be pushed is read before the work and again right before the push.
    double.delay_next(2, HOLD, method="GET", path_prefix=f"/repos/{REPO}/rules/branches/feature")
    job_id = world.comment("/agent rebase", "alice")
    world.wait_step(job_id, "push")  # rebased, guarded, now asking where it may push

    cancel_id = world.comment("/agent cancel", "alice")
    assert world.wait(cancel_id).state == JobState.SUCCEEDED
    assert world.job(job_id).state == JobState.CANCELLED

    status = world.final_status(job_id)  # the rebase's own last word, after its push step
    assert "Cancelled" in status.body or "cancelled" in status.body
    assert not double.pushes  # nothing pushed, though the push was prepared
    assert double.branch_sha(REPO, "feature") == head
    assert world.job(job_id).state == JobState.CANCELLED  # and it stays cancelled
