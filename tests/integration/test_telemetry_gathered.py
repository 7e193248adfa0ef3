"""Metrics gathered in the web process (`flush_every`) reach Redis in one round trip, late
by at most that long, and never lost at a read or at exit; on a real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from app.core.telemetry import PREFIX, Telemetry

REDIS_URL = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
ROOT = Path(__file__).resolve().parents[2]


def _field(event: str) -> str:
    return json.dumps({"event": event, "outcome": "202"})


def _in_redis(event: str) -> float | None:
    return Telemetry(REDIS_URL).read(PREFIX + "deliveries").get(_field(event))


def test_gathered_writes_wait_in_the_process_then_go_in_one_flush() -> None:
    event = f"gathered-{uuid.uuid4().hex}"
    web = Telemetry(REDIS_URL, flush_every=3600)  # no flush by time in this test
    for _ in range(5):
        web.inc("deliveries", event=event, outcome="202")
    assert _in_redis(event) is None  # nothing sent yet: no round trip per delivery
    assert web.read(PREFIX + "deliveries")[_field(event)] == 5.0  # a read sends them first
    assert _in_redis(event) == 5.0
    web.inc("deliveries", event=event, outcome="202")
    web.flush()
    assert _in_redis(event) == 6.0


def test_gathered_writes_reach_redis_within_flush_every() -> None:
    event = f"ticked-{uuid.uuid4().hex}"
    web = Telemetry(REDIS_URL, flush_every=0.05)
    web.inc("deliveries", event=event, outcome="202")
    deadline = time.monotonic() + 10
    while _in_redis(event) is None:
        assert time.monotonic() < deadline, "the flusher thread never sent the write"
        time.sleep(0.02)
    assert _in_redis(event) == 1.0


def test_gathered_writes_are_sent_when_the_process_exits(tmp_path: Path) -> None:
    event = f"exit-{uuid.uuid4().hex}"
    script = (
        "from app.core.telemetry import Telemetry\n"
        f"web = Telemetry({REDIS_URL!r}, flush_every=3600)\n"
        f"web.inc('deliveries', event={event!r}, outcome='202')\n"
    )
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
    assert done.returncode == 0
    assert _in_redis(event) == 1.0
