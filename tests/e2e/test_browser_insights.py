"""/insights in headless Chromium, signed in through the GitHub double's OAuth pages: the
figures read off the page count onloop's merged and reverted pull requests, recorded from
GitHub's deliveries to the served app."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.doubles.onloop_pulls import close, onloop_pull, revert, via_http
from tests.doubles.pages import pages_redis_url
from tests.e2e.browser import Site, browser, served, site, status_of

__all__ = ["browser", "pages_redis_url", "served", "site"]  # the fixtures
pytestmark = [pytest.mark.browser]
OPEN = "octo/open"


def figure(driver: WebDriver, element_id: str) -> str:
    """A figure's raw value (its element's data-value) as /insights shows it."""
    return str(driver.find_element(By.ID, element_id).get_attribute("data-value"))


def test_insights_count_merged_and_reverted_onloop_prs(site: Site, browser: WebDriver) -> None:
    site.double.create_repo(OPEN, {"README.md": "hi\n"}, private=True)
    site.double.set_permission(OPEN, "alice", "read")
    send = via_http(site.url)  # GitHub's deliveries, to the served app's webhook
    kept = onloop_pull(site.double, send, OPEN, "onloop/issue-7", human=True)
    undone = onloop_pull(site.double, send, OPEN, "onloop/issue-9", human=False)
    close(site.double, send, OPEN, kept, merge=True)
    revert(site.double, send, OPEN, close(site.double, send, OPEN, undone, merge=True))
    site.open(browser, "alice", "/insights")
    assert status_of(browser) == 200
    assert figure(browser, "insight-period") == "30d"
    expected = {"opened": "2", "merged": "2", "closed": "0", "reverted": "1"}
    for key, value in expected.items():
        assert figure(browser, f"insight-prs-{key}") == value, key
        assert figure(browser, f"insight-octo--open-prs-{key}") == value, key
    assert figure(browser, "insight-rework-commits") == "1"
    assert figure(browser, "insight-reworked-prs") == "1"
    assert browser.find_element(By.ID, "insight-prs-merged").text.strip() == "2"
