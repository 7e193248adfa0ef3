"""`onloop dev`: web and worker in one command, with SQLite and a Redis it starts itself."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
from dotenv import dotenv_values

from app.core.logs import configure_logging
from app.core.settings import Settings, load_settings
from app.store import migrate

VAR = Path("var")
DEV_SECRETS = VAR / "dev-secrets.env"
ENV_FILE = Path(".env")  # the file Settings reads (app.core.settings)
ANY_ADDRESS = ("", "0.0.0.0", "::")  # noqa: S104 (names them, binds nothing)
GENERATED = ("ONLOOP_WEBHOOK_SECRET", "ONLOOP_SECRET_KEY")
REDIS_DIR = VAR / "redis"  # the embedded redis-server's append-only file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stored_dev_secrets() -> dict[str, str]:
    """The secrets dev generated earlier (var/dev-secrets.env), without making any."""
    if not DEV_SECRETS.exists():
        return {}
    values = dotenv_values(DEV_SECRETS)
    return {k: v for k, v in values.items() if k in GENERATED and v}


def person_set(name: str, env_file: Path = ENV_FILE) -> bool:
    """Whether the person set `name`, in the environment or in .env: then it is theirs."""
    if os.environ.get(name):
        return True
    return env_file.exists() and bool(dotenv_values(env_file).get(name))


def dev_secrets(env_file: Path = ENV_FILE) -> dict[str, str]:
    """Webhook secret and secret key for local use, only where the person set none, kept
    across restarts in var/; the person's own values (environment or .env) always win."""
    VAR.mkdir(exist_ok=True)
    stored = stored_dev_secrets()
    wanted = {
        key: stored.get(key) or secrets.token_hex(32)
        for key in GENERATED
        if not person_set(key, env_file)
    }
    if stored | wanted != stored:
        DEV_SECRETS.write_text("".join(f"{k}={v}\n" for k, v in (stored | wanted).items()))
        DEV_SECRETS.chmod(0o600)
    return wanted


def _reachable(bind: str) -> tuple[str, int]:
    """The host and port to reach a server bound to `bind` (an any-address means loopback)."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in ANY_ADDRESS:
        host = "::1" if host == "::" else "127.0.0.1"
    return host, int(port)


def dev_public_url(bind: str) -> str | None:
    """ONLOOP_PUBLIC_URL for dev when the person set none: the address dev binds, so the
    printed address, /setup and GitHub's callback all use one host (its cookie is per host)."""
    if person_set("ONLOOP_PUBLIC_URL"):
        return None
    host, port = _reachable(bind)
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def check_port(bind: str) -> None:
    """Exit at once, before anything starts, when the address to bind is taken."""
    host, _, port = bind.rpartition(":")
    family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]") or "127.0.0.1", int(port)))
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise click.ClickException(
                f"cannot listen on {bind} ({why}): is another onloop running?"
                " Choose another address with --bind HOST:PORT"
            ) from None


def wait_for_web(web: subprocess.Popen[bytes], bind: str, timeout: float = 30.0) -> bool:
    """True once the web answers on `bind`; False when it exited first (e.g. port taken)."""
    host, port = _reachable(bind)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if web.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return web.poll() is None


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


class DevWeb:
    """`onloop dev`'s web half, a process of its own, started again whenever it exits (killed,
    crashed) until `stop`: a second at first, longer while it keeps exiting within seconds."""

    def __init__(self, bind: str) -> None:
        self.bind = bind
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.proc = self._start()

    def watch(self) -> None:
        """From now on, start it again whenever it exits."""
        threading.Thread(target=self._watch, name="onloop-dev-web", daemon=True).start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "app.cli.devweb", self.bind])

    def _watch(self) -> None:
        delay = 0.5
        while True:
            started = time.monotonic()
            code = self.proc.wait()
            if self._stopping.is_set():
                return
            delay = 0.5 if time.monotonic() - started > 10 else min(delay * 2, 10.0)
            click.echo(f"onloop dev: the web exited ({code}); starting it again", err=True)
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                self.proc = self._start()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL when it has not exited within ten seconds."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_KEPT_SIGTERM = threading.Event()


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """SIGTERM before the worker starts: exit through run_dev's `finally`, which stops the
    Redis and the web dev started (Python's default would end dev alone, at once). Kept too:
    a SystemExit raised in a garbage collector's callback is printed and lost."""
    _KEPT_SIGTERM.set()
    raise SystemExit(128 + signum)


def _keep_sigterm(_signum: int, _frame: object) -> None:
    """SIGTERM while Celery starts, before its own handler is in: a SystemExit there is lost
    (Celery goes on), so keep the signal for when the worker is ready."""
    _KEPT_SIGTERM.set()


def _pass_kept_sigterm(**_: object) -> None:
    """The worker is ready (Celery's warm-shutdown handler is in): a kept SIGTERM stops it."""
    if _KEPT_SIGTERM.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


def run_dev(bind: str) -> None:
    check_port(bind)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    generated = dev_secrets()
    os.environ.update(generated)
    public_url = dev_public_url(bind)
    if public_url is not None:
        os.environ["ONLOOP_PUBLIC_URL"] = public_url
    redis_proc = None
    web: DevWeb | None = None
    try:
        if not os.environ.get("ONLOOP_REDIS_URL"):
            redis_proc, os.environ["ONLOOP_REDIS_URL"] = start_redis()
        os.environ.setdefault("ONLOOP_LOG_JSON", "false")
        settings = load_settings()
        configure_logging(settings.log_level, settings.log_json)  # one format from here on
        migrate.upgrade(settings.database_url)
        click.echo(
            f"onloop dev: web on {settings.public_url} (listening on {bind}),"
            f" database {settings.database_url}"
        )
        if generated:
            click.echo(
                f"onloop dev: generated {', '.join(sorted(generated))} (kept in {DEV_SECRETS});"
                " set them in .env or the environment to use your own"
            )
        _say_missing(settings)
        web = DevWeb(bind)
        if not wait_for_web(web.proc, bind):
            raise click.ClickException(
                f"the web server did not start on {bind}; choose another address with --bind"
            )
        web.watch()  # killed or crashed from now on, it starts again
        click.echo(f"onloop dev: web ready on {bind}; it starts again if it exits")
        # loaded by this command only: the worker and Celery, `onloop --help` stays fast
        from celery.signals import worker_ready

        from tasks.worker import run_worker

        worker_ready.connect(_pass_kept_sigterm, weak=False)
        signal.signal(signal.SIGTERM, _keep_sigterm)
        if _KEPT_SIGTERM.is_set():  # one came, and its SystemExit was lost
            raise SystemExit(128 + signal.SIGTERM)
        run_worker(settings, concurrency=2, beat=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut this short
        try:
            if web is not None:
                web.stop()
        finally:
            if redis_proc is not None:
                stop_process(redis_proc)


def _say_missing(settings: Settings) -> None:
    missing = settings.missing()
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
