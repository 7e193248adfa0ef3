"""`onloop dev`: web and worker in one command, with SQLite and a Redis it starts itself."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from app.core.logs import configure_logging
from app.core.settings import load_settings
from app.store import migrate

VAR = Path("var")
DEV_SECRETS = VAR / "dev-secrets.env"
REDIS_DIR = VAR / "redis"  # the embedded redis-server's append-only file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dev_secrets() -> dict[str, str]:
    """Webhook secret and secret key for local use, kept across restarts in var/."""
    VAR.mkdir(exist_ok=True)
    values: dict[str, str] = {}
    if DEV_SECRETS.exists():
        for line in DEV_SECRETS.read_text().splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                values[key] = value
    for key in ("ONLOOP_WEBHOOK_SECRET", "ONLOOP_SECRET_KEY"):
        values.setdefault(key, secrets.token_hex(32))
    DEV_SECRETS.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    DEV_SECRETS.chmod(0o600)
    return values


def redis_command(binary: str, port: int, data_dir: Path) -> list[str]:
    """redis-server on loopback with an append-only file (fsync every second) in `data_dir`,
    so a restart of `onloop dev` keeps the queue."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--dir",
        str(data_dir.resolve()),
    ]


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise click.ClickException(
            "no redis-server found: install it (apt-get install redis-server) "
            "or set ONLOOP_REDIS_URL"
        )
    port = _free_port()
    proc = subprocess.Popen(redis_command(binary, port, REDIS_DIR), stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    raise click.ClickException("redis-server did not start")


def run_dev(bind: str) -> None:
    env = {k: v for k, v in dev_secrets().items() if not os.environ.get(k)}
    os.environ.update(env)
    redis_proc = None
    if not os.environ.get("ONLOOP_REDIS_URL"):
        redis_proc, os.environ["ONLOOP_REDIS_URL"] = start_redis()
    os.environ.setdefault("ONLOOP_LOG_JSON", "false")
    settings = load_settings()
    migrate.upgrade(settings.database_url)
    missing = settings.missing()
    click.echo(f"onloop dev: web on http://{bind}, database {settings.database_url}")
    click.echo(f"onloop dev: webhook secret and secret key in {DEV_SECRETS}")
    if missing:
        click.echo(
            "onloop dev: GitHub is not configured (" + ", ".join(missing) + "); "
            "deliveries are recorded but jobs cannot reach GitHub. `onloop doctor` says more."
            + (
                " The /setup address printed next creates the App."
                if settings.app_id is None
                else ""
            )
        )
    web = subprocess.Popen([sys.executable, "-m", "app.cli.devweb", bind])
    try:
        # loaded by this command only: the worker and Celery, `onloop --help` stays fast
        from tasks.worker import run_worker

        configure_logging(settings.log_level, settings.log_json)
        run_worker(settings, concurrency=2, beat=True)
    finally:
        web.terminate()
        web.wait(timeout=10)
        if redis_proc is not None:
            redis_proc.terminate()
