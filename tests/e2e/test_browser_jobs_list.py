"""/jobs in headless Chromium, signed in through the GitHub double's OAuth pages: a person
sees only the jobs of repositories they can read, and gets 404 for the others' job pages."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from app.store.models import JobState
from tests.doubles.pages import pages_redis_url
from tests.e2e.browser import Site, a_job, browser, served, site, status_of

__all__ = ["browser", "pages_redis_url", "served", "site"]  # the fixtures
pytestmark = [pytest.mark.browser]
OPEN, SECRET = "octo/open", "octo/secret"


def listed(driver: WebDriver) -> set[int]:
    """The job ids of the /jobs rows the browser shows."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#jobs tr.job-row")
    return {int(row.get_attribute("data-job") or 0) for row in rows}


def test_jobs_of_a_repository_one_cannot_read_are_not_listed_and_404(
    site: Site, browser: WebDriver
) -> None:
    for repo in (OPEN, SECRET):
        site.double.create_repo(repo, private=True)
        site.double.set_permission(repo, "alice", "read")
    site.double.set_permission(OPEN, "mallory", "read")
    seen = a_job(site.db, OPEN, JobState.SUCCEEDED)
    hidden = a_job(site.db, SECRET, JobState.FAILED, "secret output\n")
    site.open(browser, "mallory", "/jobs")
    assert status_of(browser) == 200 and listed(browser) == {seen}
    assert SECRET not in browser.page_source
    browser.get(f"{site.url}/jobs?repo={SECRET}")
    assert listed(browser) == set() and browser.find_element(By.ID, "jobs-empty")
    browser.get(f"{site.url}/jobs/{hidden}")
    assert status_of(browser) == 404 and "secret output" not in browser.page_source
    browser.get(f"{site.url}/jobs/{seen}")
    assert status_of(browser) == 200
    browser.delete_all_cookies()
    site.open(browser, "alice", "/jobs")  # who can read both sees both
    assert listed(browser) == {seen, hidden}
