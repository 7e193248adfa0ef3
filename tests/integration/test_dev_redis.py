"""`onloop dev`'s embedded redis-server keeps its queue across a restart, even a SIGKILL:
an append-only file, fsync every second, in var/redis."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from app.cli.dev import start_redis


def test_the_dev_redis_keeps_its_data_across_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # var/ is relative to where `onloop dev` runs
    proc, url = start_redis()
    try:
        redis.Redis.from_url(url).rpush("onloop", b"a job message")
        time.sleep(1.5)  # past the one second appendfsync everysec may lose
    finally:
        proc.kill()
        proc.wait(10)
    proc, url = start_redis()
    try:
        assert redis.Redis.from_url(url).lrange("onloop", 0, -1) == [b"a job message"]
        assert (tmp_path / "var" / "redis").is_dir()
    finally:
        proc.terminate()
        proc.wait(10)
