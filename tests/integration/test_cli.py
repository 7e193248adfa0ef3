"""The `onloop` command line, run as a real process: settings errors, migrations, web, replay."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.cli.server import CONFIG_FILE
from tests.doubles.dev_proc import stop_group
from tests.doubles.redis_server import free_port
from tests.doubles.webhooks import FIXTURES, SECRET

SECRETS = {
    "ONLOOP_WEBHOOK_SECRET": "hush-webhook-secret-value",
    "ONLOOP_CLIENT_SECRET": "hush-client-secret-value",
    "ONLOOP_SECRET_KEY": "hush-secret-key-value",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    return env | extra


def onloop(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=cwd,
        env=env | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# What only the commands that need it load (the imports inside their bodies).
HEAVY = ("celery", "docker", "flask", "gunicorn", "werkzeug", "tasks.worker", "app.web")


def test_help_lists_every_command_without_loading_the_heavy_parts(tmp_path: Path) -> None:
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['onloop', '--help']\n"
        "try:\n"
        "    runpy.run_module('app.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(Path(__file__).resolve().parents[2])),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    commands = ["audit", "beat", "db", "dev", "doctor", "pause", "redeliver", "replay"]
    commands += ["jobs", "resume", "sandbox", "setup", "web", "worker"]
    for command in commands:
        assert f"\n  {command} " in result.stdout, result.stdout
    assert result.stdout.rstrip().endswith("\n[]"), result.stdout


@pytest.mark.parametrize("command", ["web", "worker"])
def test_missing_settings_are_listed_together_with_exit_2(tmp_path: Path, command: str) -> None:
    result = onloop([command], tmp_path, clean_env(**SECRETS))
    assert result.returncode == 2
    expected = ["ONLOOP_APP_ID", "ONLOOP_APP_SLUG", "ONLOOP_PRIVATE_KEY_PATH", "ONLOOP_CLIENT_ID"]
    if command == "worker":
        expected.append("ONLOOP_REDIS_URL")
    for name in expected:
        assert name in result.stderr
    for name in SECRETS:
        assert name not in result.stderr  # they are set
    for value in SECRETS.values():
        assert value not in result.stdout + result.stderr


def test_invalid_value_is_named_but_not_printed(tmp_path: Path) -> None:
    env = clean_env(ONLOOP_APP_ID="hush-not-a-number", **SECRETS)
    result = onloop(["web"], tmp_path, env)
    assert result.returncode == 2
    assert "ONLOOP_APP_ID" in result.stderr
    assert "hush" not in result.stdout + result.stderr


def test_env_file_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ONLOOP_APP_ID=12\nONLOOP_APP_SLUG=x\n")
    result = onloop(["web"], tmp_path, clean_env())
    assert result.returncode == 2
    assert "ONLOOP_APP_ID" not in result.stderr and "ONLOOP_WEBHOOK_SECRET" in result.stderr


def test_web_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    env = clean_env(**full_settings(tmp_path))
    result = onloop(["web", "--bind", "127.0.0.1:1"], tmp_path, env)
    assert result.returncode == 2 and "onloop db upgrade" in result.stderr


@pytest.mark.parametrize("command", ["web", "worker"])
def test_lower_case_log_level_is_accepted(tmp_path: Path, command: str) -> None:
    env = clean_env(
        **full_settings(tmp_path), ONLOOP_LOG_LEVEL="debug", ONLOOP_REDIS_URL="redis://127.0.0.1:1"
    )
    result = onloop([command], tmp_path, env)
    # Past logging set-up to the next check: the database is not migrated.
    assert result.returncode == 2 and "onloop db upgrade" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_log_level_is_a_settings_error(tmp_path: Path) -> None:
    result = onloop(
        ["web"], tmp_path, clean_env(**full_settings(tmp_path), ONLOOP_LOG_LEVEL="loud")
    )
    assert result.returncode == 2, result.stderr
    assert "invalid settings" in result.stderr and "ONLOOP_LOG_LEVEL" in result.stderr
    assert "Traceback" not in result.stderr


def test_gunicorn_settings_come_from_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    for name in [n for n in os.environ if n.startswith("ONLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert runpy.run_path(str(CONFIG_FILE))["workers"] == 2
    (tmp_path / ".env").write_text(
        "ONLOOP_WEB_WORKERS=3\nONLOOP_WEB_THREADS=5\nONLOOP_ACCESS_LOG=false\n"
    )
    config = runpy.run_path(str(CONFIG_FILE))
    assert (config["workers"], config["threads"], config["accesslog"]) == (3, 5, None)


@pytest.mark.timeout(60)  # the old client retried with backoff for about six minutes
def test_redeliver_says_when_github_is_unreachable(tmp_path: Path) -> None:

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "app.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    api_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = clean_env(
        ONLOOP_APP_ID="1",
        ONLOOP_PRIVATE_KEY_PATH=str(pem),
        ONLOOP_GITHUB_API_URL=api_url,
        ONLOOP_DATABASE_URL=f"sqlite:///{tmp_path}/onloop.db",
    )
    result = onloop(["redeliver", "--since", "1h"], tmp_path, env, timeout=50)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot reach GitHub at {api_url}: " in result.stderr, result.stderr
    assert "ONLOOP_GITHUB_API_URL / network" in result.stderr
    assert "Traceback" not in result.stderr


def full_settings(tmp_path: Path) -> dict[str, str]:
    key = tmp_path / "app.pem"
    key.write_text("not used by the web process")
    return {
        "ONLOOP_APP_ID": "1",
        "ONLOOP_APP_SLUG": "onloop",
        "ONLOOP_PRIVATE_KEY_PATH": str(key),
        "ONLOOP_WEBHOOK_SECRET": SECRET,
        "ONLOOP_CLIENT_ID": "Iv1.test",
        "ONLOOP_CLIENT_SECRET": "client-secret",
        "ONLOOP_SECRET_KEY": "secret-key",
        "ONLOOP_DATABASE_URL": f"sqlite:///{tmp_path}/web.db",
        "ONLOOP_ACCESS_LOG": "0",
    }


@pytest.fixture
def web_server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    env = clean_env(**full_settings(tmp_path))
    upgraded = onloop(["db", "upgrade"], tmp_path, env)
    assert upgraded.returncode == 0, upgraded.stderr
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "web", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its gunicorn workers too, for stop_group
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(url + "/healthz", timeout=1)
            break
        except requests.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "web did not start"
            time.sleep(0.1)
    yield url, env
    stop_group(proc)


def test_replay_through_gunicorn(web_server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, env = web_server
    assert requests.get(url + "/readyz", timeout=5).json() == {"status": "ok"}
    ping = onloop(
        [
            "replay",
            str(FIXTURES / "ping.with-app_id.json"),
            "--event",
            "ping",
            "--url",
            url + "/webhooks/github",
        ],
        tmp_path,
        env,
    )
    assert ping.returncode == 0 and ping.stdout.startswith("204")
    label = onloop(
        [
            "replay",
            str(FIXTURES / "issues.labeled.json"),
            "--event",
            "issues",
            "--url",
            url + "/webhooks/github",
            "--delivery",
            "replayed-1",
        ],
        tmp_path,
        env,
    )
    assert label.returncode == 0 and label.stdout.startswith("204")  # label `bug` is ignored
    again = onloop(
        [
            "replay",
            str(FIXTURES / "issues.labeled.json"),
            "--event",
            "issues",
            "--url",
            url + "/webhooks/github",
            "--delivery",
            "replayed-1",
        ],
        tmp_path,
        env,
    )
    assert again.stdout.startswith("200")  # the same GUID twice
    wrong = onloop(
        [
            "replay",
            str(FIXTURES / "ping.with-app_id.json"),
            "--event",
            "ping",
            "--url",
            url + "/webhooks/github",
        ],
        tmp_path,
        env | {"ONLOOP_WEBHOOK_SECRET": "another-secret"},
    )
    assert wrong.returncode == 1 and wrong.stdout.startswith("401")
    metrics = requests.get(url + "/metrics", timeout=5).text
    assert "onloop_deliveries_total" in metrics


def test_onloop_dev_runs_with_embedded_defaults(tmp_path: Path) -> None:
    """The README's first command: no settings at all, SQLite and its own Redis."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "dev", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(Path(__file__).resolve().parents[2])),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its Redis and web too, for stop_group
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "onloop dev did not come up"
            time.sleep(0.2)
        secrets = dict(
            line.split("=", 1)
            for line in (tmp_path / "var" / "dev-secrets.env").read_text().split()
        )
        result = onloop(
            [
                "replay",
                str(FIXTURES / "ping.with-app_id.json"),
                "--event",
                "ping",
                "--url",
                url + "/webhooks/github",
            ],
            tmp_path,
            clean_env(ONLOOP_WEBHOOK_SECRET=secrets["ONLOOP_WEBHOOK_SECRET"]),
        )
        assert result.stdout.startswith("204"), result.stdout + result.stderr
        assert (tmp_path / "var" / "onloop.db").exists()
    finally:
        stop_group(proc)
