"""`/setup`: the GitHub App manifest flow against the GitHub double, and the .env it writes."""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from dotenv import dotenv_values
from flask import Flask

from app.core.settings import Settings
from app.github import manifest
from app.github.clients import GitHubApp
from app.web import create_app
from app.web.setup import SetupOptions, new_code, setup_state
from tests.doubles.dev_proc import stop_group
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.manifests import acting_as
from tests.doubles.github.settings import settings_for
from tests.doubles.manifest_flow import created, form, setup_path, submit
from tests.doubles.redis_server import free_port

PUBLIC = "https://onloop.example.com"
ROOT = Path(__file__).resolve().parents[2]
UNSET = dict.fromkeys(
    ("app_id", "app_slug", "client_id", "client_secret", "webhook_secret", "private_key_path")
)


def fresh_settings(double: GitHubDouble, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings pointed at the double with no GitHub App configured yet."""
    return settings_for(double, tmp_path, public_url=PUBLIC, **{**UNSET, **overrides})


def setup_app(settings: Settings, env_file: Path, overwrite: bool = False) -> Flask:
    app = create_app(settings)  # the setup pages are part of the normal web app
    setup_state(app).options = SetupOptions(env_file=env_file, overwrite=overwrite)
    return app


def run_flow(app: Flask, client: Any, double: GitHubDouble, query: str = "") -> tuple[Any, str]:
    start = client.get(PUBLIC + setup_path(app, query))
    assert start.status_code == 200, start.get_data(as_text=True)
    location = submit(*form(start.get_data(as_text=True)))
    assert location.startswith(f"{PUBLIC}/setup/callback?code=")
    return client.get(location), location


def test_setup_page_posts_onloops_manifest_to_github_with_a_signed_state(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    app = setup_app(fresh_settings(github_double, tmp_path), tmp_path / ".env")
    page = app.test_client().get(PUBLIC + setup_path(app))
    assert page.status_code == 200
    assert "onloop_setup=" in page.headers["Set-Cookie"]
    action, body = form(page.get_data(as_text=True))
    assert action.startswith(f"{github_double.url}/settings/apps/new?state=")
    assert len(action.split("state=", 1)[1]) > 40  # signed, not a bare nonce
    assert body == {
        "name": "onloop-onloop",
        "url": PUBLIC,
        "description": body["description"],
        "hook_attributes": {"url": f"{PUBLIC}/webhooks/github", "active": True},
        "redirect_url": f"{PUBLIC}/setup/callback",
        "callback_urls": [f"{PUBLIC}/oauth/callback"],
        "request_oauth_on_install": True,
        "public": False,
        "default_permissions": {
            "contents": "write",
            "pull_requests": "write",
            "issues": "write",
            "checks": "write",
            "actions": "read",
            "metadata": "read",
        },
        "default_events": [
            "issues",
            "issue_comment",
            "pull_request",
            "pull_request_review",
            "pull_request_review_comment",
            "check_suite",
            "workflow_run",
            "push",
        ],
    }


def test_org_variant_posts_to_the_organisations_page(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    app = setup_app(fresh_settings(github_double, tmp_path), tmp_path / ".env")
    client = app.test_client()
    page = client.get(PUBLIC + setup_path(app, "org=octo-org"))
    action, body = form(page.get_data(as_text=True))
    assert action.startswith(f"{github_double.url}/organizations/octo-org/settings/apps/new?state=")
    assert body["name"] == "onloop-octo-org"
    assert client.get(PUBLIC + setup_path(app, "org=../evil")).status_code == 400
    page, _ = run_flow(app, client, github_double, "org=octo-org&name=Agents%20Inc")
    assert page.status_code == 200, page.get_data(as_text=True)
    assert created(github_double).app.owner == "octo-org"
    assert created(github_double).app.slug == "agents-inc"


def test_callback_converts_the_code_and_writes_env_and_a_0600_key(
    github_double: GitHubDouble,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    env_file = tmp_path / "deploy" / ".env"
    env_file.parent.mkdir()
    env_file.write_text("# mine\nONLOOP_PUBLIC_URL=https://onloop.example.com\nOTHER='kept'\n")
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    client = app.test_client()
    page, _ = run_flow(app, client, github_double)
    text = page.get_data(as_text=True)
    assert page.status_code == 200, text
    made = created(github_double)
    values = dotenv_values(env_file)
    assert values["ONLOOP_APP_ID"] == str(made.app.id)
    assert values["ONLOOP_APP_SLUG"] == made.app.slug == "onloop-onloop"
    assert values["ONLOOP_CLIENT_ID"] == made.app.client_id
    assert values["ONLOOP_CLIENT_SECRET"] == made.app.client_secret
    assert values["ONLOOP_WEBHOOK_SECRET"] == made.app.webhook_secret
    assert values["ONLOOP_PUBLIC_URL"] == PUBLIC and values["OTHER"] == "kept"
    assert env_file.read_text().startswith("# mine\n")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    key_path = Path(str(values["ONLOOP_PRIVATE_KEY_PATH"]))
    assert key_path.is_absolute() and key_path.parent == env_file.parent
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert public == made.app.public_key_pem
    # The written settings work: the key signs an App JWT that GitHub accepts for this App.
    written = Settings(_env_file=env_file, github_api_url=github_double.api_url)  # type: ignore[call-arg]
    with acting_as(github_double, made):
        assert GitHubApp.for_settings(written).app_slug() == made.app.slug
    # The code went to GitHub once, without credentials; no value shows anywhere.
    (conversion,) = github_double.calls("POST", "/app-manifests/")
    assert conversion.status == 201 and "authorization" not in conversion.headers
    seen = text + caplog.text + "".join(capsys.readouterr())
    for secret in (made.app.client_secret, made.app.webhook_secret, made.pem.splitlines()[1]):
        assert secret not in seen
    assert "github app registered" in seen  # the event is logged, its values are not
    # Done: the page will not start a second App.
    assert client.get(PUBLIC + "/setup").status_code == 409


def test_existing_values_are_not_overwritten_and_the_code_is_not_spent(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    client = app.test_client()
    start = client.get(PUBLIC + setup_path(app))
    location = submit(*form(start.get_data(as_text=True)))
    env_file.write_text("ONLOOP_CLIENT_SECRET=already-here\n")  # configured meanwhile
    page = client.get(location)
    assert page.status_code == 409
    assert "ONLOOP_CLIENT_SECRET" in page.get_data(as_text=True)
    assert "already-here" not in page.get_data(as_text=True)
    assert env_file.read_text() == "ONLOOP_CLIENT_SECRET=already-here\n"
    assert not github_double.calls("POST", "/app-manifests/")
    assert not created(github_double).converted
    assert client.get(PUBLIC + "/setup").status_code == 409


def test_overwrite_when_asked_replaces_each_value_once(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("ONLOOP_APP_ID=1\nexport ONLOOP_APP_ID=2\nONLOOP_LOG_LEVEL=DEBUG\n")
    (tmp_path / "onloop-onloop.private-key.pem").write_text("old key\n")
    app = setup_app(fresh_settings(github_double, tmp_path), env_file, overwrite=True)
    page, _ = run_flow(app, app.test_client(), github_double)
    assert page.status_code == 200, page.get_data(as_text=True)
    lines = env_file.read_text().splitlines()
    assert [line for line in lines if "ONLOOP_APP_ID" in line] == [
        f"ONLOOP_APP_ID={created(github_double).app.id}"
    ]
    assert "ONLOOP_LOG_LEVEL=DEBUG" in lines
    assert (tmp_path / "onloop-onloop.private-key.pem").read_text().startswith("-----BEGIN")


def test_callback_refuses_a_forged_state(github_double: GitHubDouble, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    browser = app.test_client()
    location = submit(*form(browser.get(PUBLIC + setup_path(app)).get_data(as_text=True)))
    code = location.split("code=")[1].split("&")[0]
    assert browser.get(f"{PUBLIC}/setup/callback?code={code}&state=forged").status_code == 400
    assert browser.get(f"{PUBLIC}/setup/callback?code={code}").status_code == 400
    assert not env_file.exists()
    assert not github_double.calls("POST", "/app-manifests/")


def test_a_callback_without_the_cookie_but_a_valid_state_finishes_and_warns(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    """GitHub has created the App by then: leaving it orphaned helps nobody. The signed state
    shows that whoever holds the console's setup code started it (e.g. on another host name,
    whose cookie the browser keeps apart)."""
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    location = submit(*form(app.test_client().get(PUBLIC + setup_path(app)).get_data(as_text=True)))
    done = app.test_client().get(location)  # another cookie jar
    assert done.status_code == 200, done.get_data(as_text=True)
    assert "not the one that opened" in done.get_data(as_text=True)
    assert dotenv_values(env_file).get("ONLOOP_APP_ID")


def test_a_code_github_does_not_know_writes_nothing(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    client = app.test_client()
    _, location = run_flow(app, client, github_double)  # converts the code once
    env_file.unlink()
    for path in tmp_path.glob("*.pem"):
        path.unlink()
    setup_state(app).done.clear()
    setup_state(app).code = new_code()  # as after a restart, which prints a new one
    action, _ = form(client.get(PUBLIC + setup_path(app)).get_data(as_text=True))
    code = location.split("code=")[1].split("&")[0]
    state = action.split("state=", 1)[1]
    again = client.get(f"{PUBLIC}/setup/callback?code={code}&state={state}")  # spent code
    assert again.status_code == 502
    assert "GitHub answered 404" in again.get_data(as_text=True)
    assert not env_file.exists() and not list(tmp_path.glob("*.pem"))


def test_setup_without_the_console_code_is_refused(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    """Whoever reaches an unconfigured onloop first may not make it their App's."""
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file)
    client = app.test_client()
    for path in ("/setup", "/setup?code=", "/setup?code=guess", "/setup?org=octo-org"):
        page = client.get(PUBLIC + path)
        text = page.get_data(as_text=True)
        assert page.status_code == 403, (path, text)
        assert "printed on its console" in text and "manifest-form" not in text
        assert "Set-Cookie" not in page.headers and setup_state(app).code not in text
    assert client.get(PUBLIC + setup_path(app)).status_code == 200
    assert not env_file.exists() and not github_double.calls("POST", "/app-manifests/")


def test_the_code_completes_one_setup_and_a_new_code_voids_old_pages(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    app = setup_app(fresh_settings(github_double, tmp_path), env_file, overwrite=True)
    client = app.test_client()
    code = setup_state(app).code
    location = submit(*form(client.get(PUBLIC + setup_path(app)).get_data(as_text=True)))
    setup_state(app).code = new_code()  # onloop restarted meanwhile: the old page is void
    refused = client.get(location)
    assert refused.status_code == 403 and not env_file.exists()
    assert not github_double.calls("POST", "/app-manifests/")
    page, _ = run_flow(app, client, github_double)
    assert page.status_code == 200 and env_file.exists()
    setup_state(app).done.clear()  # even were it not done, the code is spent
    assert client.get(f"{PUBLIC}/setup?code={code}").status_code == 403
    assert client.get(f"{PUBLIC}/setup?code={setup_state(app).code}").status_code == 403


def test_setup_is_closed_once_an_app_is_configured(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    app = create_app(settings_for(github_double, tmp_path))  # a configured onloop
    setup_state(app).options = SetupOptions(env_file=tmp_path / ".env")
    assert app.test_client().get(PUBLIC + "/setup").status_code == 404
    unkeyed = setup_app(fresh_settings(github_double, tmp_path, secret_key=None), tmp_path / "e")
    assert unkeyed.test_client().get(PUBLIC + setup_path(unkeyed)).status_code == 503


def test_the_double_converts_a_code_once(github_double: GitHubDouble, tmp_path: Path) -> None:
    app = setup_app(fresh_settings(github_double, tmp_path), tmp_path / ".env")
    location = submit(*form(app.test_client().get(PUBLIC + setup_path(app)).get_data(as_text=True)))
    code = location.split("code=")[1].split("&")[0]
    url = f"{github_double.api_url}/app-manifests/{code}/conversions"
    first = requests.post(url, timeout=10)
    assert first.status_code == 201
    body = first.json()
    assert {"id", "slug", "client_id", "client_secret", "webhook_secret", "pem"} <= set(body)
    assert body["pem"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert body["owner"]["login"] == github_double.app.owner
    assert requests.post(url, timeout=10).status_code == 404


@pytest.mark.parametrize(
    "value", ["plain-1.2", "with space", "it's", 'quote" and $HOME', "back\\slash"]
)
def test_update_env_values_read_back_the_same(tmp_path: Path, value: str) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("A=1\n")
    manifest.update_env(env_file, {"B": value})
    manifest.update_env(env_file, {"A": "2"})
    assert dotenv_values(env_file) == {"A": "2", "B": value}


@pytest.mark.slow
def test_onloop_dev_prints_the_setup_address_to_open(tmp_path: Path) -> None:
    """The README's first run: `onloop dev` with no App says on the console what to open."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "dev", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=env | {"ONLOOP_PUBLIC_URL": public, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its Redis and web too, for stop_group
    )
    lines: list[str] = []
    assert proc.stdout is not None
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not (urls := re.findall(rf"open ({public}/setup\?code=\S+)", "".join(lines))):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        (url,) = urls
        while not _answers(public + "/readyz"):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        assert "The /setup address printed next creates the App." in "".join(lines)
        assert requests.get(public + "/setup", timeout=10).status_code == 403
        page = requests.get(url, timeout=10)
        assert page.status_code == 200 and "manifest-form" in page.text, page.text
    finally:
        stop_group(proc)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.ConnectionError:
        return False
