"""`onloop worker` as a real process for end-to-end tests, with settings passed as env."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The ONLOOP_* environment that rebuilds `settings` in another process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(getattr(settings, name), SecretStr):
            value = getattr(settings, name).get_secret_value()
        env[f"ONLOOP_{name.upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    env.update(extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


class WorkerProcess:
    def __init__(self, settings: Settings, log: Path, concurrency: int = 2, **extra: str) -> None:
        self.concurrency = concurrency
        self.env = settings_env(
            settings,
            ONLOOP_JOB_LEASE_SECONDS="3",
            ONLOOP_GITHUB_PACING="false",
            ONLOOP_DISPATCH_INTERVAL="0.2",
            ONLOOP_LOG_JSON="false",
            **extra,
        )
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        handle = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--concurrency", str(self.concurrency)],
            cwd=ROOT,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL, as when a machine dies: no cleanup, no acknowledgement."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def wait_until(condition: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
