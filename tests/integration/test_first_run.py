"""The first run as a new user makes it: `onloop dev`, its .env, its port, /setup and replay."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from dotenv import dotenv_values
from sqlalchemy import select

from app.intake.events import sign
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState
from tests.doubles.dev_proc import group_left, stop_group
from tests.doubles.github.double import GitHubDouble
from tests.doubles.manifest_flow import form, submit
from tests.doubles.redis_server import free_port
from tests.doubles.webhooks import FIXTURES, load_fixture

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    return env | {"PYTHONPATH": str(ROOT)} | extra


@dataclass
class Dev:
    """A running `onloop dev` and what it printed so far."""

    proc: subprocess.Popen[str]
    url: str
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while not (found := re.search(pattern, self.output)):
            assert self.proc.poll() is None, self.output
            assert time.monotonic() < deadline, self.output
            time.sleep(0.2)
        return found

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            assert self.proc.poll() is None, self.output
            assert time.monotonic() < deadline, self.output
            time.sleep(0.2)


def start_dev(cwd: Path, port: int, **env: str) -> Dev:
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "dev", "--bind", f"127.0.0.1:{port}"],
        cwd=cwd,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its Redis and web too, for stop_group
    )
    dev = Dev(proc, f"http://127.0.0.1:{port}")
    threading.Thread(target=lambda: dev.lines.extend(proc.stdout or ()), daemon=True).start()
    return dev


@pytest.fixture
def running() -> Iterator[list[Dev]]:
    devs: list[Dev] = []
    yield devs
    for dev in devs:
        stop_group(dev.proc)


def replay(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "replay", *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_values_in_env_file_win_over_the_generated_dev_secrets(
    tmp_path: Path, running: list[Dev]
) -> None:
    (tmp_path / "var").mkdir()
    # an earlier `onloop dev` generated both; then the person put the App's real secret in .env
    (tmp_path / "var" / "dev-secrets.env").write_text(
        "ONLOOP_WEBHOOK_SECRET=generated-earlier\nONLOOP_SECRET_KEY=generated-key\n"
    )
    (tmp_path / ".env").write_text("ONLOOP_WEBHOOK_SECRET=the-apps-real-secret\n")
    port = free_port()
    dev = start_dev(tmp_path, port)
    running.append(dev)
    dev.wait_ready()
    url = dev.url + "/webhooks/github"
    fixture = str(FIXTURES / "ping.with-app_id.json")
    mine = replay(tmp_path, fixture, "--event", "ping", "--url", url)
    assert mine.stdout.startswith("204"), mine.stdout + mine.stderr  # .env's secret is the one
    theirs = replay(
        tmp_path,
        fixture,
        "--event",
        "ping",
        "--url",
        url,
        ONLOOP_WEBHOOK_SECRET="generated-earlier",
    )
    assert theirs.stdout.startswith("401"), theirs.stdout
    assert "generated ONLOOP_SECRET_KEY (kept in var/dev-secrets.env)" in dev.output
    assert "ONLOOP_WEBHOOK_SECRET" not in dev.wait_for(r"generated [^\n]*").group(0)


def test_replay_finds_devs_secret_and_says_why_a_delivery_was_ignored(
    tmp_path: Path, running: list[Dev]
) -> None:
    port = free_port()
    dev = start_dev(tmp_path, port)
    running.append(dev)
    dev.wait_ready()
    url = dev.url + "/webhooks/github"
    label = replay(
        tmp_path, str(FIXTURES / "issues.labeled.json"), "--event", "issues", "--url", url
    )
    assert label.returncode == 0, label.stdout + label.stderr
    assert label.stdout == "204 ignored: not the fix label\n", label.stdout
    secret = dotenv_values(tmp_path / "var" / "dev-secrets.env")["ONLOOP_WEBHOOK_SECRET"]
    assert secret
    body = (FIXTURES / "ping.with-app_id.json").read_bytes()
    headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "first-run-ping"}
    headers["X-Hub-Signature-256"] = sign(body, secret)
    answer = requests.post(url, data=body, headers=headers, timeout=5)
    assert answer.status_code == 204 and "Content-Type" not in answer.headers, answer.headers
    assert answer.headers["X-Onloop-Outcome"]


def test_replay_errors_are_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/webhooks/github"
    refused = replay(
        tmp_path, str(FIXTURES / "ping.with-app_id.json"), "--event", "ping", "--url", url,
        ONLOOP_WEBHOOK_SECRET="s",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "connection refused" in refused.stderr and "onloop dev" in refused.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    broken = replay(tmp_path, str(bad), "--event", "ping", "--url", url, ONLOOP_WEBHOOK_SECRET="s")
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert "is not JSON" in broken.stderr and broken.stderr.strip().count("\n") == 0
    nothing = replay(tmp_path, str(FIXTURES / "ping.with-app_id.json"), "--event", "ping")
    assert nothing.returncode == 1 and "no webhook secret" in nothing.stderr


def test_dev_with_its_port_taken_exits_at_once_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "app.cli", "dev", "--bind", f"127.0.0.1:{port}"],
            cwd=tmp_path,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert "--bind" in result.stderr and f"127.0.0.1:{port}" in result.stderr, result.stderr
    assert time.monotonic() - started < 30  # generous: it did not wait for anything to time out
    assert not (tmp_path / "var" / "onloop.db").exists()  # nothing started, nothing migrated


def test_setup_under_dev_keeps_one_host_so_its_cookie_comes_back(
    tmp_path: Path, running: list[Dev], github_double: GitHubDouble
) -> None:
    """A browser-like cookie jar (per host): the address dev prints, /setup and GitHub's
    callback all use one host, so the setup finishes in the browser that started it."""
    port = free_port()
    dev = start_dev(
        tmp_path,
        port,
        ONLOOP_GITHUB_URL=github_double.url,
        ONLOOP_GITHUB_API_URL=github_double.api_url,
    )
    running.append(dev)
    printed = dev.wait_for(r"web on (\S+) ").group(1)
    setup = dev.wait_for(r"open (\S+/setup\?code=\S+)").group(1)
    dev.wait_ready()
    assert urlsplit(setup).netloc == urlsplit(printed).netloc == f"127.0.0.1:{port}"
    # its cookie jar is per host, as a browser's; closed after, so no kept-alive connection
    # holds dev's web when the test stops it
    with requests.Session() as browser:
        page = browser.get(setup, timeout=10)
        assert page.status_code == 200, page.text
        location = submit(*form(page.text))
        assert urlsplit(location).netloc == urlsplit(setup).netloc
        done = browser.get(location, timeout=30)
    assert done.status_code == 200 and "is ready" in done.text, done.text
    assert "not the one that opened" not in done.text
    assert dotenv_values(tmp_path / ".env").get("ONLOOP_APP_ID")


def test_a_job_without_an_app_ends_with_one_clear_line(tmp_path: Path, running: list[Dev]) -> None:
    """The documented dev state: no App. A labelled issue's job fails saying what to do, once,
    with no traceback; the stored result and the audit log say the same."""
    payload = load_fixture("issues.labeled")
    payload["label"]["name"] = "agent:fix"
    payload["installation"] = {"id": 42, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI="}
    delivery = tmp_path / "label.json"
    delivery.write_text(json.dumps(payload))
    dev = start_dev(tmp_path, free_port())
    running.append(dev)
    dev.wait_ready()
    url = dev.url + "/webhooks/github"
    sent = replay(tmp_path, str(delivery), "--event", "issues", "--fresh", "--url", url)
    assert sent.stdout.startswith("202"), sent.stdout + sent.stderr
    dev.wait_for(r"job\.finished[^\n]*state=failed")
    line = "GitHub App not configured: run `onloop setup`"
    assert dev.output.count(line) == 1, dev.output
    assert "Traceback" not in dev.output
    db = Database(f"sqlite:///{tmp_path / 'var' / 'onloop.db'}")
    try:
        with db.read() as s:
            (job,) = s.scalars(select(Job)).all()
            failures = s.scalars(select(AuditEntry).where(AuditEntry.action == "job.failed")).all()
        assert job.state == JobState.FAILED and job.result["error"] == line
        assert [entry.detail for entry in failures] == [{"error": line}]
    finally:
        db.dispose()


def test_dev_stopped_as_soon_as_its_web_is_ready_stops_its_redis_and_web(tmp_path: Path) -> None:
    """SIGTERM before the worker has started (it takes over SIGTERM then): dev still stops
    the Redis and the web it started, and exits."""
    dev = start_dev(tmp_path, free_port())
    try:
        dev.wait_for(r"web ready on")
        dev.proc.terminate()
        try:
            dev.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("dev did not exit on SIGTERM:\n" + dev.output)
        deadline = time.monotonic() + 30
        while group_left(dev.proc.pid):
            assert time.monotonic() < deadline, "dev exited and left its Redis or web running"
            time.sleep(0.1)
    finally:
        stop_group(dev.proc)
