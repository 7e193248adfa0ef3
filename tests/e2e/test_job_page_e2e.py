"""A job's page end to end: a real worker runs the job in a Docker sandbox, its output is
kept per step for the page (as text), and the page's Cancel stops a running job and its
sandbox (the browser side of it is issue 17's browser test)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import joblog
from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.payloads import workflow_run_failed
from tests.doubles.worker_proc import wait_until
from tests.e2e.test_fix_e2e import failing_run, make_world
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
LOUD = 'python3 -c \'print("<script>x</script>", chr(27) + "[31mred"); raise SystemExit(3)\''


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(github_double, database_url, tmp_path)


def start_fix(world: World, test: str) -> int:
    world.authorize("alice")
    world.double.commit(REPO, "main", {".github/onloop.yml": f"checks:\n  test: {test}\n"})
    run = failing_run(world)
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(world.double, REPO, run, 1))
    return job_id


def test_a_job_s_output_is_kept_per_step_and_shown_as_text(world: World) -> None:
    job_id = start_fix(world, LOUD)
    job = world.wait(job_id)
    assert job.state == JobState.FAILED, (job.result, world.worker.output())
    world.final_status(job_id)
    _, kept = joblog.by_step(world.db, job_id)
    assert "<script>x</script> \x1b[31mred" in kept["validate"], kept
    assert "$ sh -c 'python3 -c" in kept["validate"] and kept["validate"].endswith("[exit 3]\n")
    page = open_signed_in(world.client, world.double, "alice", f"/jobs/{job_id}")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "<script>x" not in html
    assert '&lt;script&gt;x&lt;/script&gt; <span class="ansi-red">red' in html
    assert f'href="{world.double.url}/{REPO}/runs/' in html  # its check run
    status = world.job(job_id).result.get("status_comment")
    assert status and f'href="{status}"' in html  # its status comment


def test_cancel_on_the_page_stops_the_running_job_and_its_sandbox(world: World) -> None:
    job_id = start_fix(world, "sleep 300")
    world.wait_step(job_id, "validate")
    wait_until(lambda: world.running("sleep 300"), 120, "the test command to run")
    page = open_signed_in(world.client, world.double, "alice", f"/jobs/{job_id}")
    found = re.search(r'name="csrf" value="([^"]+)"', page.get_data(as_text=True))
    assert found is not None
    stream = world.client.get(f"/jobs/{job_id}/events")
    body = iter(stream.response)
    next(body)  # subscribed
    done = world.client.post(f"/jobs/{job_id}/cancel", data={"csrf": found.group(1)})
    assert done.status_code == 303
    assert world.wait(job_id).state == JobState.CANCELLED
    assert "cancelled" in b"".join(body).decode()  # the stream said so, and ended
    stream.close()
    wait_until(lambda: not world.containers(), 60, "the job's sandbox to be removed")
    assert "cancelled" in world.final_status(job_id).body.lower()
