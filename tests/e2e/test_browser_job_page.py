"""The job page in headless Chromium: signed in through the GitHub double's OAuth pages, a
running job's page follows the worker without reloading and its Cancel stops the job and its
Docker sandbox; hostile output shows as text. Run with ONLOOP_SCREENSHOT=1 to renew the
README's screenshot, docs/job-page.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from app.store import joblog
from app.store.db import Database
from app.store.models import Job, JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.pages import pages_redis_url
from tests.doubles.payloads import issue_labeled
from tests.doubles.worker_proc import wait_until
from tests.e2e.browser import (
    Served,
    Site,
    a_job,
    browser,
    click,
    screenshot,
    served,
    sign_in,
    site,
    status_of,
    step,
    steps_of,
)
from tests.e2e.test_fix_e2e import make_world
from tests.e2e.world import REPO, World

__all__ = ["browser", "pages_redis_url", "served", "site"]  # the fixtures
pytestmark = [pytest.mark.browser]

# The agent speaks a line a second for a while, then fixes the typo; the check then runs
# until the job is cancelled.
SLOW_AGENT = (
    "for i in $(seq 1 20); do echo \"agent line $i\"; sleep 1; done; sed -i 's/teh/the/' README.md"
)
CHECKS = "checks:\n  test: sleep 300\n"
# Fold every step's output but the agent's and the running step's (for the screenshot).
FOLD_JS = """
document.querySelectorAll('#steps li.step').forEach((li) => {
  const details = li.querySelector('details');
  const name = li.querySelector('.step-name').textContent;
  if (details) {
    details.open = name === 'agent' || li.classList.contains('step-running');
    const output = details.querySelector('pre.output');
    output.scrollTop = output.scrollHeight; // its last lines
  }
});
"""
HOSTILE = (
    "<script>document.title = 'pwned'</script>\n"
    "<!-- a comment -->\n"
    "```\nfenced\n```\n"
    "\x1b[31mred\x1b[0m plain <img src=x onerror=\"document.title = 'img'\">\n"
)


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, served: Served
) -> Iterator[World]:
    """The e2e world (a real worker, Docker) whose pages are served at `served.url`, the URL
    the worker's links name too (ONLOOP_PUBLIC_URL)."""
    for world in make_world(
        github_double,
        database_url,
        tmp_path,
        agent="command",
        agent_command=SLOW_AGENT,
        public_url=served.url,
    ):
        served.serve(world.app)
        yield world


def job_state(driver: WebDriver) -> str:
    """The state the page shows, read in one script: a live update may replace the element
    between a find and a read (a stale element)."""
    return str(driver.execute_script("return document.getElementById('job-state').innerText"))


@pytest.mark.docker
@pytest.mark.slow
def test_a_running_job_s_page_follows_it_live_and_cancels_it(
    world: World, served: Served, browser: WebDriver, tmp_path: Path
) -> None:
    world.double.commit(REPO, "main", {".github/onloop.yml": CHECKS})
    world.authorize("carol")
    issue = world.double.create_issue(REPO, "Typo in README", "It says teh.", user="alice")
    labelled = issue_labeled(world.double, REPO, issue.number, user="carol")
    (job_id,) = world.deliver("issues", labelled)
    path = f"/jobs/{job_id}"
    sign_in(browser, world.double, served.url, "carol", path)
    browser.execute_script("window.onloopKept = 'this page, never reloaded';")

    def agent_output() -> str:
        return next((o for n, s, o in steps_of(browser) if n == "agent" and s == "running"), "")

    first = wait_until(lambda: "agent line" in agent_output() and agent_output(), 180, "output")
    grown = wait_until(
        lambda: len(agent_output()) > len(first) and agent_output(), 60, "the log to grow"
    )
    assert grown.startswith(first), (first, grown)
    names = [n for n, _, _ in steps_of(browser)]
    wait_until(
        lambda: (
            [n for n, s, _ in steps_of(browser)][-1:] == ["validate"]
            and steps_of(browser)[-1][1] == "running"
        ),
        120,
        "a new step, validate, to appear",
    )
    assert "validate" not in names  # it was not there when the page was loaded
    assert browser.execute_script("return window.onloopKept") == "this page, never reloaded"
    assert job_state(browser) == JobState.RUNNING
    wait_until(lambda: world.running("sleep 300"), 120, "the check to run")
    browser.execute_script(FOLD_JS)  # as a person would, before the screenshot
    shot = screenshot(browser, tmp_path, "job-page.png", down_to="steps")
    assert shot.read_bytes().startswith(b"\x89PNG")
    click(browser, "#cancel button")
    wait_until(lambda: job_state(browser) == JobState.CANCELLED, 60, "the page to say cancelled")
    assert browser.current_url == served.url + path
    assert not browser.find_elements(By.ID, "cancel")
    assert world.wait(job_id).state == JobState.CANCELLED
    assert world.job(job_id).result.get("reason") == "cancelled by @carol"
    wait_until(lambda: not world.containers(), 60, "the job's sandbox to be removed")


def hostile_job(db: Database) -> int:
    """A failed job whose validate step printed HOSTILE."""
    return a_job(db, REPO, JobState.FAILED, "$ ./test\n" + HOSTILE + "[exit 1]\n")


def test_hostile_output_shows_as_text_in_the_browser(site: Site, browser: WebDriver) -> None:
    site.double.create_repo(REPO, private=True)
    site.double.set_permission(REPO, "alice", "read")
    job_id = hostile_job(site.db)
    site.open(browser, "alice", f"/jobs/{job_id}")
    output = browser.find_element(By.CSS_SELECTOR, "#steps pre.output")
    shown = output.text
    for text in ("<script>document.title = 'pwned'</script>", "<!-- a comment -->", "```"):
        assert text in shown, shown
    assert "red plain <img src=x" in shown and "\x1b" not in shown
    assert output.find_element(By.CSS_SELECTOR, "span.ansi-red").text == "red"
    inside = "return Array.from(arguments[0].childNodes, (n) => n.nodeName)"
    assert set(browser.execute_script(inside, output)) <= {"#text", "SPAN"}
    assert not browser.find_elements(By.CSS_SELECTOR, "#steps img, #steps script")
    assert browser.title.startswith(f"Job #{job_id}"), browser.title  # no script ran


def test_someone_who_cannot_read_the_repository_gets_404(site: Site, browser: WebDriver) -> None:
    site.double.create_repo(REPO, private=True)
    site.double.set_permission(REPO, "alice", "read")
    site.double.user("mallory")
    job_id = hostile_job(site.db)
    site.open(browser, "mallory", f"/jobs/{job_id}")
    assert status_of(browser) == 404
    assert browser.find_element(By.TAG_NAME, "h1").text == "404"
    assert "pwned" not in browser.page_source and REPO not in browser.page_source


def test_without_its_stream_a_running_job_s_page_polls(site: Site, browser: WebDriver) -> None:
    site.double.create_repo(REPO, private=True)
    site.double.set_permission(REPO, "alice", "read")
    running = a_job(site.db, REPO, JobState.RUNNING, "$ ./test\nfirst line\n")
    path = f"/jobs/{running}"
    site.open(browser, "alice", path)  # this tab takes the one live stream here
    wait_until(lambda: not site.stream_free(), 30, "the first tab's stream")
    browser.switch_to.new_window("tab")
    browser.get(site.url + path)  # its stream is refused (503): it polls
    browser.execute_script("window.onloopKept = 'this page, never reloaded';")
    assert not site.stream_free()
    assert [(n, s) for n, s, _ in steps_of(browser)] == [("validate", "running")]
    joblog.append(site.db, running, "second line\n", 4096, step="validate")
    with site.db.transaction() as s:  # no worker publishes anything: only polls see it
        job = s.get(Job, running)
        assert job is not None
        job.steps = [step("validate", "succeeded"), step("push", "running")]
    wait_until(
        lambda: (
            [(n, s) for n, s, _ in steps_of(browser)]
            == [("validate", "succeeded"), ("push", "running")]
        ),
        60,
        "the page to poll",
    )
    assert "first line\nsecond line" in steps_of(browser)[0][2]
    assert browser.execute_script("return window.onloopKept") == "this page, never reloaded"
