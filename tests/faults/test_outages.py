"""1,000 deliveries (ONLOOP_FAULT_SCALE) with Redis stopped for 20 s in the middle, and with
PostgreSQL stopped for 15 s: nothing acknowledged is lost or run twice, only deliveries made
while PostgreSQL is down are refused, and the backlog drains within 30 s of a fault-free run."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.harness import Stack, scale, seconds
from tests.faults.runs import RATE, run

pytestmark = pytest.mark.faults

SLACK = 30.0  # the drain after an outage may take this much longer than without one
GRACE = 5.0  # seconds after PostgreSQL is back in which the web may still refuse


def baseline(stack: Stack, baselines: dict[str, float]) -> float:
    """The fault-free drain time of this session (run here if no test has yet)."""
    if "outage" not in baselines:
        found = run(stack, "fault-free")
        assert found.lost == 0 and found.duplicated == 0, stack.logs()
        baselines["outage"] = found.drain
    return baselines["outage"]


def outage(down: Callable[[], None], up: Callable[[], None], length: float) -> Callable[[], None]:
    """A fault that waits until 30% of the sending is done, then is down for `length` s."""

    def fault() -> None:
        time.sleep(0.3 * scale() / RATE)
        down()
        time.sleep(length)
        up()

    return fault


def test_fault_free(stack: Stack, baselines: dict[str, float]) -> None:
    baselines.pop("outage", None)
    baseline(stack, baselines)


def test_redis_stopped_in_the_middle(stack: Stack, baselines: dict[str, float]) -> None:
    before = baseline(stack, baselines)
    fault = outage(stack.redis.stop, stack.redis.start, seconds(20))
    found = run(stack, "redis down", fault, timeout=before + SLACK + 2)
    assert found.lost == 0 and found.duplicated == 0, stack.logs()
    assert found.refused == 0  # the web does not need Redis to acknowledge
    assert found.drain <= before + SLACK, (found.drain, before)


def test_postgres_stopped_in_the_middle(stack: Stack, baselines: dict[str, float]) -> None:
    before = baseline(stack, baselines)
    windows: list[float] = []

    def down() -> None:
        windows.append(time.time())
        stack.outage.down()

    def up() -> None:
        stack.outage.up()
        windows.append(time.time())

    sender = stack.sender()
    found = run(stack, "postgres down", outage(down, up, seconds(15)), before + SLACK + 2, sender)
    assert found.lost == 0 and found.duplicated == 0, stack.logs()
    assert found.recorded == found.sent == found.acknowledged  # every 2xx recorded
    assert found.drain <= before + SLACK, (found.drain, before)
    went, came = windows
    refused = sender.refused()
    assert refused, "nothing was sent while PostgreSQL was down"
    # refused only while it was down (and as its connections come back), and with a 503
    assert {a.status for a in refused} == {503}, refused
    assert all(went <= a.at <= came + GRACE for a in refused), (went, came, refused)
