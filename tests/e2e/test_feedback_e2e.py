"""What a person sees of a job, end to end: 👀 on their command, one status comment edited as the
job goes, a check run in_progress → completed, `/agent status|cancel|help` answers, and a
cancel that stops a running sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.worker_proc import wait_until
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(github_double, database_url, tmp_path)


def pull_request(world: World, config: str | None = None) -> int:
    files = {"pyproject.toml": "[tool.ruff]\n", "widgets.py": '"""Widgets."""\n'}
    if config is not None:
        files[".github/onloop.yml"] = config
    world.double.commit(REPO, "main", files)  # type: ignore[arg-type]
    world.double.create_branch(REPO, "more")
    world.double.commit(REPO, "more", {"more.py": "import os\n"}, message="More")
    return world.double.create_pull(REPO, "more", title="More", user="alice").number


def test_a_job_has_eyes_one_status_comment_edited_in_place_and_a_check_run(world: World) -> None:
    number = pull_request(world)
    world.authorize("alice")
    job_id = world.comment("/agent review", "alice", number)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    bot = world.double.app.bot_login
    assert world.reactions(job_id) == [("eyes", bot)]

    # 👀 is the first thing the worker writes for the job, beside its first reads (on the
    # job's feedback lane: the job's own reads do not wait for it, nor it for them)
    calls = world.double.calls(surface="api")
    writes = [
        i for i, c in enumerate(calls) if c.method != "GET" and c.path.startswith(f"/repos/{REPO}/")
    ]
    eyes = next(i for i, c in enumerate(calls) if c.path.endswith("/reactions"))
    assert eyes == writes[0] and calls[eyes].identity.kind == "installation"

    status = world.final_status(job_id, number)
    assert world.bot_comments(number) == [status]
    edits = [e.json["body"] for e in world.edits(status)]
    shown = [f"step {k} of 7" for k in range(3, 8)]  # diff ... review, after authorization
    for k in shown:
        assert any(k in body and "**Working**" in body for body in edits), (k, edits)
    assert "**Done**" in edits[-1]
    assert "**Done**" in status.body and "[review](" in status.body
    assert "[check run](" in status.body and "<details>" in status.body
    assert all(e.identity.kind == "installation" for e in world.edits(status))

    head = world.double.branch_sha(REPO, "more")
    assert head is not None
    (run,) = world.completed_runs(head)
    assert run.name == "onloop/review_pr" and run.external_id == str(job_id)
    assert run.history[0][0] == "in_progress" and run.history[-1][:2] == ("completed", "neutral")
    assert all(status == "in_progress" for status, _, _ in run.history[:-1])
    # the status comment and the check run both lead to the job's page on onloop
    page = f"{world.settings.public_url.rstrip('/')}/jobs/{job_id}"
    assert f"([job #{job_id}]({page}))" in status.body
    assert any(f"([job #{job_id}]({page}))" in body for body in edits if "**Working**" in body)
    assert run.details_url == page and page in str(run.output.get("summary"))
    (created,) = world.double.calls("POST", f"/repos/{REPO}/check-runs")
    assert created.json["details_url"] == page  # from its first write on, not only at the end


def test_status_shows_the_steps_and_cancel_stops_the_running_sandbox(world: World) -> None:
    number = pull_request(world, 'checks:\n  fix: ["sleep 600"]\n')
    world.authorize("alice")
    job_id = world.comment("/agent review", "alice", number)
    world.wait_step(job_id, "fixers")  # the fixer sleeps: the sandbox is busy
    (sandbox,) = wait_until(lambda: world.running("sleep 600"), 60, "the job's busy sandbox")

    asked = world.wait(world.comment("/agent status", "carol", number))
    assert asked.state == JobState.SUCCEEDED, (asked.result, world.worker.output())
    answer = next(c for c in world.bot_comments(number) if f"job-{asked.id} -->" in c.body)
    assert f"#{job_id}" in answer.body and "running, step 6: fixers" in answer.body
    assert "- ⏳ fixers" in answer.body and "- ✅ lint" in answer.body

    cancel = world.wait(world.comment("/agent cancel", "alice", number))
    assert cancel.state == JobState.SUCCEEDED, (cancel.result, world.worker.output())
    assert cancel.result == {"cancelled": [job_id]}
    assert world.job(job_id).state == JobState.CANCELLED
    # `sleep 600` would hold the container for ten minutes: it goes because the job stopped it
    gone = lambda: sandbox not in world.containers()  # noqa: E731
    wait_until(gone, 60, "the job's sandbox to be removed")
    head = world.double.branch_sha(REPO, "more")
    assert head is not None
    (run,) = world.completed_runs(head)
    assert run.conclusion == "cancelled"
    status = world.final_status(job_id, number)
    assert "**Cancelled**" in status.body and "cancelled by @alice" in status.body
    assert "/agent review" in status.body  # how to ask again
    job = world.job(job_id)
    assert job.state == JobState.CANCELLED and job.steps[-1]["state"] == "cancelled"
    assert not [v for v in world.double.reviews.values() if v.number == number]
    assert not world.running("sleep 600")


def test_cancel_stops_a_running_setup_too(world: World) -> None:
    number = pull_request(world, "sandbox:\n  setup: sleep 600\n")
    world.authorize("alice")
    job_id = world.comment("/agent review", "alice", number)
    (sandbox,) = wait_until(lambda: world.running("sleep 600"), 120, "the job's setup")
    cancel = world.wait(world.comment("/agent cancel", "alice", number))
    assert cancel.result == {"cancelled": [job_id]}, (cancel.result, world.worker.output())
    # `sleep 600` would hold setup's container for ten minutes: it goes because it was stopped
    wait_until(lambda: sandbox not in world.containers(), 60, "setup's sandbox to be removed")
    status = world.final_status(job_id, number)
    assert "**Cancelled**" in status.body, status.body
    assert world.job(job_id).state == JobState.CANCELLED
    assert not world.running("sleep 600")


def test_cancelling_a_job_that_waits_for_authorisation_says_so_in_its_comment(
    world: World,
) -> None:
    number = pull_request(world)
    job_id = world.comment("/agent review", "carol", number)  # carol never authorised onloop
    world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION,))
    (ask,) = world.bot_comments(number)
    assert "/oauth/login" in ask.body and "@carol" in ask.body
    cancel = world.wait(world.comment("/agent cancel", "alice", number))
    assert cancel.result == {"cancelled": [job_id]}, (cancel.result, world.worker.output())
    assert world.job(job_id).state == JobState.CANCELLED
    stale = world.final_status(job_id, number)
    assert (
        stale.id == ask.id and "**Cancelled**" in stale.body and "cancelled by @alice" in stale.body
    )
    assert "/oauth/login" not in stale.body  # no request left standing for a dead job


def test_a_failing_setup_says_what_happened_and_what_to_do(world: World) -> None:
    number = pull_request(world, "sandbox:\n  setup: echo broken dependency >&2; exit 3\n")
    world.authorize("alice")
    job_id = world.comment("/agent review", "alice", number)
    job = world.wait(job_id)
    assert job.state == JobState.FAILED, (job.result, world.worker.output())
    status = world.final_status(job_id, number)
    assert "**Failed** at step **sandbox**" in status.body
    assert "`sandbox.setup`" in status.body and "/agent review" in status.body
    assert "<details><summary>output of sandbox</summary>" in status.body
    assert "broken dependency" in status.body
    head = world.double.branch_sha(REPO, "more")
    assert head is not None
    (run,) = world.completed_runs(head)
    assert run.conclusion == "failure"


def test_help_lists_the_commands_this_repository_allows(world: World) -> None:
    number = pull_request(world, "commands: [review]\n")
    job_id = world.comment("/agent help", "carol", number)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    assert world.reactions(job_id) == [("eyes", world.double.app.bot_login)]
    (reply,) = world.bot_comments(number)
    assert "`/agent review`" in reply.body and "`/agent rebase`" not in reply.body
    assert "`/agent cancel`" in reply.body and "`/agent status`" in reply.body
    assert not world.double.checks.runs  # help is an answer, not a check


def steps(world: World, job_id: int) -> list[str]:
    return [step["name"] for step in world.job(job_id).steps or []]


def test_the_sandbox_starts_while_the_status_comment_is_being_written(world: World) -> None:
    """The job does not wait for GitHub's answer to its status comment: its sandbox starts
    and runs commands while the comment's POST is still held; the comment still comes (one)."""
    number = pull_request(world)
    world.authorize("alice")
    held = world.double.delay_next(
        seconds=60, method="POST", path_prefix=f"/repos/{REPO}/issues/{number}/comments"
    )
    job_id = world.comment("/agent review", "alice", number)
    try:
        wait_until(lambda: held.remaining == 0, 60, "the status comment's POST")
        # the sandbox started (its step ended) and the job's first command in it is under way
        wait_until(lambda: "lint" in steps(world, job_id), 60, "the job's first sandbox command")
        assert world.bot_comments(number) == []
    finally:
        held.released.set()
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    status = world.final_status(job_id, number)
    assert world.bot_comments(number) == [status] and "**Done**" in status.body
