"""`onloop setup` as a real process: it serves the manifest flow, writes .env, then exits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from dotenv import dotenv_values

from tests.doubles.github.double import GitHubDouble
from tests.doubles.manifest_flow import created, form, submit
from tests.doubles.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def _cli_env(double: GitHubDouble, public: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    return env | {
        "ONLOOP_GITHUB_URL": double.url,
        "ONLOOP_GITHUB_API_URL": double.api_url,
        "ONLOOP_PUBLIC_URL": public,
        "ONLOOP_LOG_JSON": "false",
        "PYTHONPATH": str(ROOT),
    }


def _wait_for_port(port: int, proc: subprocess.Popen[str]) -> None:
    for _ in range(300):
        assert proc.poll() is None, proc.communicate()[0]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("onloop setup did not listen")


def _read_until(proc: subprocess.Popen[str], start: str) -> list[str]:
    """The lines `proc` prints up to the first that starts with `start`."""
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith(start):
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    return lines


@pytest.mark.slow
def test_onloop_setup_serves_the_flow_then_exits(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    env_file = tmp_path / "conf" / ".env"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "setup", "--env-file", str(env_file)],
        cwd=tmp_path,
        env=_cli_env(github_double, public),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_port(port, proc)
        printed = _read_until(proc, "Open ")  # the address with the setup code, on the console
        url = printed[-1].split()[1]
        assert url.startswith(f"{public}/setup?code=") and len(url) > len(public) + 30
        browser = requests.Session()
        assert browser.get(public + "/setup", timeout=10).status_code == 403
        page = browser.get(url, timeout=10)
        assert page.status_code == 200, page.text
        location = submit(*form(page.text))
        assert location.startswith(public + "/setup/callback?")
        assert browser.get(location, timeout=10).status_code == 200
        rest, _ = proc.communicate(timeout=30)
        out = "".join(printed) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    made = created(github_double)
    values = dotenv_values(env_file)
    assert values["ONLOOP_APP_ID"] == str(made.app.id)
    assert len(values["ONLOOP_SECRET_KEY"] or "") >= 40  # generated for the signed state
    assert values["ONLOOP_PUBLIC_URL"] == public  # the App's addresses were built on it
    assert f"Open {url} in your browser" in out
    assert "ONLOOP_CLIENT_SECRET" in out and str(values["ONLOOP_PRIVATE_KEY_PATH"]) in out
    for secret in (made.app.client_secret, made.app.webhook_secret, values["ONLOOP_SECRET_KEY"]):
        assert str(secret) not in out


def test_onloop_setup_refuses_when_an_app_is_configured(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("ONLOOP_APP_ID=77\nONLOOP_CLIENT_SECRET=hush-value\n")
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "setup", "--env-file", str(env_file)],
        cwd=tmp_path,
        env=_cli_env(github_double, "http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "already configured: ONLOOP_APP_ID, ONLOOP_CLIENT_SECRET" in done.stderr
    assert "--force" in done.stderr and "hush-value" not in done.stderr + done.stdout
    assert env_file.read_text() == "ONLOOP_APP_ID=77\nONLOOP_CLIENT_SECRET=hush-value\n"


def _setup(double: GitHubDouble, tmp_path: Path, public: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "setup", "--env-file", str(tmp_path / ".env")],
        cwd=tmp_path,
        env=_cli_env(double, public),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "public", ["localhost:8000", "ftp://example.com", "https://", "https://h.example?x=1"]
)
def test_onloop_setup_refuses_a_public_url_github_could_not_use(
    github_double: GitHubDouble, tmp_path: Path, public: str
) -> None:
    done = _setup(github_double, tmp_path, public)
    assert done.returncode == 2, done.stderr
    assert "ONLOOP_PUBLIC_URL" in done.stderr and public in done.stderr
    assert not (tmp_path / ".env").exists()


def test_onloop_setup_with_its_port_taken_names_bind_and_writes_nothing(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _setup(github_double, tmp_path, f"http://127.0.0.1:{port}")
    assert done.returncode == 1
    assert "--bind" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / ".env").exists()


def test_onloop_setup_stopped_says_what_it_kept(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "setup", "--env-file", str(tmp_path / ".env")],
        cwd=tmp_path,
        env=_cli_env(github_double, f"http://127.0.0.1:{port}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_port(port, proc)
        _read_until(proc, "Open ")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)  # a loaded CI machine can be slow to answer
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out
    assert "nothing was written" not in out and "Traceback" not in out
    assert "kept ONLOOP_SECRET_KEY, ONLOOP_PUBLIC_URL" in out, out
    assert set(dotenv_values(tmp_path / ".env")) == {"ONLOOP_SECRET_KEY", "ONLOOP_PUBLIC_URL"}
