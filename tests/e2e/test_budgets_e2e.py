"""Daily budgets end to end: a job over budget does not start; one that reaches its budget
mid-way pushes what it has to `onloop/wip/<job>` and says so; `/agent continue` finishes it
(webhook → worker → Docker sandbox → the GitHub double)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.payloads import pr_comment
from tests.doubles.webhooks import deliver
from tests.e2e.test_fix_e2e import label_issue, make_world, tree_at
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# A command agent that works in two halves: the first run leaves a note and reports more
# tokens than the day's budget has; the run that finds the note finishes the fix, cheaply.
AGENT = (
    "if [ -f wip.txt ]; then echo finished >> wip.txt && sed -i 's/teh/the/' README.md && "
    """echo '{"input_tokens": 10, "output_tokens": 5}' > "$USAGE_FILE"; """
    "else echo started > wip.txt && "
    """echo '{"input_tokens": 900, "output_tokens": 300}' > "$USAGE_FILE"; fi"""
)


def org_file(path: Path, budgets: str) -> Path:
    path.write_text(f"budgets:\n{budgets}", encoding="utf-8")
    return path


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[World]:
    org = org_file(tmp_path / "org.yml", request.param)
    yield from make_world(
        github_double,
        database_url,
        tmp_path,
        agent="command",
        agent_command=AGENT,
        config_file=org,
    )


def comment_on_issue(world: World, number: int, body: str, user: str) -> int:
    """`user` comments `body` on issue `number` (not a pull request); the job's id."""
    made = world.double.add_comment(REPO, number, body, user)
    payload = pr_comment(world.double, REPO, number, body, user)
    payload["issue"].pop("pull_request")
    payload["comment"]["id"] = made.id
    response = deliver(world.client, "issue_comment", payload)
    assert response.status_code == 202, response.get_data(as_text=True)
    (job_id,) = response.get_json()["jobs"]
    return int(job_id)


@pytest.mark.parametrize("world", ["  jobs: 0\n"], indirect=True)
def test_a_job_over_its_budget_does_not_start_and_says_which_and_when(world: World) -> None:
    issue, job = label_issue(world, "carol")
    assert job.state == JobState.FAILED, (job.result, job.steps, world.worker.output())
    assert job.result["outcome"] == "over_budget", job.result
    assert (job.result["budget"], job.result["scope"]) == ("jobs", "repository")
    status = world.final_status(job.id, issue.number)
    assert "repository's daily `jobs` budget (0 of 0 spent)" in status.body
    assert "resets at" in status.body and "00:00 UTC" in status.body
    names = [s["name"] for s in job.steps]
    assert "agent" not in names and "branch" not in names
    assert not world.double.pushes and world.containers() == []
    assert job.sandbox_seconds == 0 and job.agent_tokens_in == 0


@pytest.mark.parametrize("world", ["  agent_tokens: 1000\n"], indirect=True)
def test_a_job_stopped_at_its_budget_pushes_wip_and_continue_finishes_it(
    world: World, tmp_path: Path
) -> None:
    issue, job = label_issue(world, "carol")
    assert job.state == JobState.FAILED, (job.result, job.steps, world.worker.output())
    assert job.result.get("outcome") == "budget_reached", (job.result, job.steps)
    assert (job.agent_tokens_in, job.agent_tokens_out) == (900, 300)
    assert job.sandbox_seconds > 0
    wip = f"onloop/wip/{job.id}"
    assert job.result["wip_branch"] == wip
    sha = world.double.branch_sha(REPO, wip)
    assert sha is not None and sha == job.result["wip_sha"]
    files = tree_at(world.double, sha, tmp_path / "wip")
    assert (files / "wip.txt").read_text() == "started\n"
    assert "teh" in (files / "README.md").read_text()  # the fix is not done yet
    assert world.double.branch_sha(REPO, f"onloop/issue-{issue.number}") is None
    (push,) = world.double.pushes
    assert push.identity.login == "carol" and push.updates[0].ref == f"refs/heads/{wip}"
    status = world.final_status(job.id, issue.number)
    assert "repository's daily `agent_tokens` budget (1200 of 1000 spent)" in status.body
    assert f"`{wip}`" in status.body and "`/agent continue`" in status.body
    assert "Done:" in status.body and "Remaining:" in status.body
    metrics = world.client.get("/metrics").get_data(as_text=True)
    stops = 'onloop_budget_stops_total{budget="agent_tokens",outcome="budget_reached"} 1.0'
    assert stops in metrics

    # Asked again the same day, the budget is still used up: refused before it starts.
    again = world.wait(comment_on_issue(world, issue.number, "/agent continue", "carol"))
    assert again.result.get("outcome") == "over_budget", (again.result, again.steps)
    assert len(world.double.pushes) == 1

    # The next day's budget (here: the operator raises it) lets it finish from the WIP branch.
    org_file(Path(str(world.settings.config_file)), "  agent_tokens: 50000\n")
    done = world.wait(comment_on_issue(world, issue.number, "/agent continue", "carol"))
    if done.state != JobState.SUCCEEDED:  # whole, where an assertion's message is cut short
        print(world.worker.output())
    assert done.state == JobState.SUCCEEDED, (done.result, done.steps)
    assert done.result["continued"] == job.id and done.result["pr"]
    head = world.double.branch_sha(REPO, f"onloop/issue-{issue.number}")
    assert head is not None
    files = tree_at(world.double, head, tmp_path / "done")
    assert (files / "wip.txt").read_text() == "started\nfinished\n"
    assert "the widgets" in (files / "README.md").read_text()
    assert world.double.branch_sha(REPO, wip) == sha  # the WIP branch is left as it was

    # Nothing is left to continue once it finished.
    last = world.wait(comment_on_issue(world, issue.number, "/agent continue", "carol"))
    assert last.result.get("outcome") == "nothing_to_continue", last.result
