"""`onloop web` under gunicorn as a real process, whose master a test can SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from app.core.settings import Settings
from tests.doubles.redis_server import free_port
from tests.doubles.worker_proc import ROOT, settings_env


class WebProcess:
    """`python -m app.cli web --bind 127.0.0.1:<port>`: a gunicorn master and its workers."""

    def __init__(self, settings: Settings, log: Path, **extra: str) -> None:
        self.port = free_port()
        self.env = settings_env(
            settings,
            ONLOOP_LOG_JSON="false",
            ONLOOP_ACCESS_LOG="false",
            ONLOOP_WEB_WORKERS="2",
            ONLOOP_WEB_THREADS="8",
            **extra,
        )
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> WebProcess:
        handle = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "web", "--bind", f"127.0.0.1:{self.port}"],
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError(f"onloop web did not start:\n{self.output()}")

    def kill_master(self) -> None:
        """SIGKILL the gunicorn master only, as the OOM killer would: its workers are left
        to notice and go, in-flight requests with them."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        deadline = time.monotonic() + 30  # the orphaned workers still hold the port
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            time.sleep(0.1)
        _kill_group(self.proc.pid)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc.pid)
            self.proc.wait(timeout=10)
        self.proc = None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
