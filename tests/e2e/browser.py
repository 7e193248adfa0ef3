"""onloop's pages in a real browser: the Flask app served over HTTP by a threaded werkzeug
server (each event stream holds a thread) and headless Chromium from Debian's packages
(`chromium`, `chromium-driver`; .ci/browser.sh installs them), driven by Selenium. Selenium is
pointed at both binaries and told to stay offline: it never downloads a browser or a driver."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from werkzeug.serving import BaseWSGIServer, make_server

from app.core.publicurl import oauth_callback_url
from app.core.settings import Settings
from app.store import joblog
from app.store.db import Database
from app.store.models import Job, JobState, utcnow
from app.web import create_app
from app.web.pages.state import EXTENSION
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.worker_proc import wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOT_ENV = "ONLOOP_SCREENSHOT"  # =1: the job page's test writes docs/job-page.png
DOCS = Path(__file__).resolve().parents[2] / "docs"
# Each step on the page as [name, state, its output's text] (textContent: closed <details> too).
STEPS_JS = """
return Array.from(document.querySelectorAll('#steps li.step'), (li) => [
  li.querySelector('.step-name').textContent,
  li.querySelector('.step-state').textContent,
  li.querySelector('pre.output')?.textContent ?? '',
]);
"""


def _not_yet(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"not serving yet\n"]


class Served:
    """A WSGI app on 127.0.0.1 at `url`. The port is taken first, so the app's settings
    (ONLOOP_PUBLIC_URL) can name it; `serve(app)` then answers with that app."""

    def __init__(self) -> None:
        self.server: BaseWSGIServer = make_server("127.0.0.1", 0, _not_yet, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve(self, app: Any) -> Served:
        self.server.app = app
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
        self.server.server_close()  # request threads are daemons: open streams do not block


@pytest.fixture
def served() -> Iterator[Served]:
    """A port for onloop's pages; the test calls `served.serve(app)`."""
    server = Served()
    yield server
    server.stop()


@dataclass
class Site:
    """onloop's pages (the real Flask app) served at `url`, signing in on the GitHub double;
    no worker: a test writes the jobs it shows into `db`."""

    double: GitHubDouble
    settings: Settings
    db: Database
    url: str
    app: Flask

    def open(self, driver: WebDriver, login: str, path: str) -> None:
        """`login` signs in through the double's OAuth pages and lands on `path`."""
        sign_in(driver, self.double, self.url, login, path)

    def stream_free(self) -> bool:
        """Whether the served app would start a live stream now (it has one: web_threads=2)."""
        streams = self.app.extensions[EXTENSION].streams
        if not streams.acquire(blocking=False):
            return False
        streams.release()
        return True


@pytest.fixture
def site(
    github_double: GitHubDouble,
    database_url: str,
    pages_redis_url: str,
    tmp_path: Path,
    served: Served,
) -> Iterator[Site]:
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=pages_redis_url,
        public_url=served.url,
        web_threads=2,  # one live stream at a time: a test that holds it sees the page poll
    )
    db = Database(database_url)
    app = create_app(settings, db=db)
    served.serve(app)
    yield Site(github_double, settings, db, served.url, app)
    db.dispose()


def step(name: str, state: str) -> dict[str, object]:
    """A job's step as the worker records it."""
    return {"name": name, "kind": "deterministic", "state": state, "duration": 1.0}


def a_job(db: Database, repo: str, state: str, output: str = "") -> int:
    """A fix_ci job of `repo` asked by alice, in `state`, whose validate step (in that state
    too) printed `output`."""
    with db.transaction() as s:
        job = Job(
            kind="fix_ci",
            repo=repo,
            number=1,
            requested_by="alice",
            state=state,
            steps=[step("validate", state)],
            started_at=utcnow(),
            finished_at=None if state == JobState.RUNNING else utcnow(),
        )
        s.add(job)
        s.flush()
        job_id = int(job.id)
    joblog.append(db, job_id, output, 4096, step="validate")
    return job_id


def status_of(driver: WebDriver) -> int:
    """The HTTP status of the page the browser shows (Navigation Timing's responseStatus)."""
    return int(
        driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")
    )


def require_chromium() -> None:
    """Skip without Debian's chromium and chromedriver, except in CI, where that fails."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if not missing:
        return
    why = f"headless Chromium is not installed ({', '.join(missing)}; bash .ci/browser.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(why + ": CI must run the browser tests", pytrace=False)
    pytest.skip(why)


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebDriver]:
    """A fresh headless Chromium (its own profile: no cookies from another test)."""
    require_chromium()
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never fetch anything
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # as root, as CI runs
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1100",
        "--no-first-run",
        "--disable-background-networking",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def sign_in(driver: WebDriver, double: GitHubDouble, base: str, login: str, path: str) -> None:
    """Open `path` without a session: onloop sends the browser to the double's authorize page,
    which shows GitHub's sign-in page until `login` signs in there; then GitHub approves, sends
    the browser back to onloop's callback and onloop back to `path`."""
    double.oauth.register_callback(oauth_callback_url(base))
    double.oauth.user = None
    driver.get(base + path)
    authorize = double.url + "/login/oauth/authorize?"
    wait_until(lambda: driver.current_url.startswith(authorize), 30, "GitHub's authorize page")
    assert "Sign in to GitHub" in driver.page_source
    double.oauth.user = login  # the person signs in on GitHub's page
    driver.refresh()
    wait_until(lambda: driver.current_url == base + path, 30, f"back at {path}")


def steps_of(driver: WebDriver) -> list[tuple[str, str, str]]:
    """The steps the page shows now: (name, state, output)."""
    return [(str(n), str(s), str(o)) for n, s, o in driver.execute_script(STEPS_JS)]


def click(driver: WebDriver, selector: str, attempts: int = 5) -> None:
    """Click the element `selector` names, as a person would: a live update that replaced it
    between finding and clicking (a stale reference) is found again, not a failure."""
    for attempt in range(attempts):
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            if attempt == attempts - 1:
                raise


def screenshot(driver: WebDriver, tmp_path: Path, name: str, down_to: str) -> Path:
    """A PNG of the page from its top down to the end of the element with id `down_to`: into
    docs/ (for the README) when ONLOOP_SCREENSHOT=1, else into the test's directory, so a
    normal run leaves the work tree as it was."""
    folder = DOCS if os.environ.get(SCREENSHOT_ENV) == "1" else tmp_path
    target = folder / name
    width, bottom = driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return [document.documentElement.clientWidth, Math.ceil(r.bottom + window.scrollY)];",
        down_to,
    )
    clip = {"x": 0, "y": 0, "width": width, "height": bottom + 16, "scale": 1}
    # Beyond the window too (Chrome DevTools' Page.captureScreenshot).
    shot = driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    target.write_bytes(base64.b64decode(shot["data"]))
    return target
