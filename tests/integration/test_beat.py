"""`onloop beat`: the scheduler alone queues the periodic redelivery sweep on Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.doubles.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def beat_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    return env | {"PYTHONPATH": str(ROOT), "ONLOOP_LOG_JSON": "false"} | extra


@pytest.mark.slow
def test_beat_queues_the_redelivery_sweep_and_runs_no_jobs(
    broker: RedisServer, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "beat"],
        cwd=tmp_path,
        env=beat_env(ONLOOP_REDIS_URL=broker.url, ONLOOP_REDELIVER_INTERVAL="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = redis.Redis.from_url(broker.url)
    try:
        deadline = time.monotonic() + 60
        while client.llen("onloop") < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0].decode()
            time.sleep(0.2)
        messages = [json.loads(m) for m in client.lrange("onloop", 0, -1)]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert len(messages) >= 2, out.decode()  # queued each interval, consumed by nobody here
    assert {m["headers"]["task"] for m in messages} == {"onloop.redeliver_missed"}
    assert (tmp_path / "var" / "celerybeat-schedule").exists() or list(
        (tmp_path / "var").glob("celerybeat-schedule*")
    )


def test_beat_without_redis_names_the_setting_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "beat"],
        cwd=tmp_path,
        env=beat_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "ONLOOP_REDIS_URL" in done.stderr
