"""GitHub write slots across processes on a private Redis: a bounded number, a lease its
holder renews, freed when the holder is killed, and no stall when Redis freezes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.github.write_slots import WriteSlots
from tests.doubles.redis_server import RedisServer

KEY = "installation:5"
LEASE = 1.5  # seconds; short, so the test waits little for a lease to run out

HOLDER = """
import sys, time
from app.github.write_slots import WriteSlots
slots = WriteSlots(sys.argv[1], concurrency=int(sys.argv[2]), lease=float(sys.argv[3]))
with slots.hold(sys.argv[4]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    redis_server = RedisServer(tmp_path).start()
    yield redis_server
    if redis_server.proc is not None:
        os.kill(redis_server.proc.pid, signal.SIGCONT)  # in case a test froze it
    redis_server.stop()


def start_holder(url: str, concurrency: int) -> subprocess.Popen[str]:
    """Another worker process that takes a slot of KEY and keeps it until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(concurrency), str(LEASE), KEY],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def wait_for(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def test_a_killed_holders_slot_is_free_again_within_the_lease(server: RedisServer) -> None:
    here = WriteSlots(server.url, concurrency=1, lease=LEASE)
    holder = start_holder(server.url, 1)
    try:
        time.sleep(LEASE * 3)  # several leases: its renewals keep the slot
        assert here.live(KEY) == 1
        entered = threading.Event()

        def write() -> None:
            with here.hold(KEY):
                entered.set()

        waiting = threading.Thread(target=write, daemon=True)
        waiting.start()
        assert not entered.wait(LEASE)  # the one slot is taken
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        # the dead holder renews nothing: its slot ends with its lease (plus polling)
        assert entered.wait(LEASE * 4)
        waiting.join(5)
        assert here.live(KEY) == 0
    finally:
        holder.kill()
        holder.wait(10)


def test_n_slots_across_processes_and_no_more(server: RedisServer) -> None:
    holders = [start_holder(server.url, 3) for _ in range(2)]
    try:
        here = WriteSlots(server.url, concurrency=3, lease=LEASE)
        other = WriteSlots(server.url, concurrency=3, lease=LEASE, wait=LEASE / 2)
        assert here.live(KEY) == 2
        with here.hold(KEY):  # the third slot
            assert here.live(KEY) == 3
            # a fourth writer waits; this one's `wait` runs out and it writes anyway, unslotted
            with other.hold(KEY):
                assert other.live(KEY) == 3
            with other.hold("installation:6"):  # another installation has slots of its own
                assert other.live("installation:6") == 1
        assert here.live(KEY) == 2  # released at once, not at the lease's end
    finally:
        for proc in holders:
            proc.kill()
            proc.wait(10)


def test_a_slot_outlives_its_lease_while_its_holder_renews(server: RedisServer) -> None:
    slots = WriteSlots(server.url, concurrency=1, lease=LEASE)
    other = WriteSlots(server.url, concurrency=1, lease=LEASE, wait=0.2)
    with slots.hold(KEY):
        time.sleep(LEASE * 3)
        assert other.live(KEY) == 1
    assert other.live(KEY) == 0


def test_a_frozen_redis_does_not_stall_writes(server: RedisServer) -> None:
    """SIGSTOP: Redis accepts connections but never answers. A write goes on after one
    Redis timeout, under the in-process bound, not after a lease or the slot wait."""
    slots = WriteSlots(server.url, concurrency=2, lease=LEASE)
    with slots.hold(KEY):  # connected before the freeze
        pass
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    done = threading.Event()

    def writes() -> None:
        for _ in range(5):
            with slots.hold(KEY):
                pass
        done.set()

    threading.Thread(target=writes, daemon=True).start()
    assert done.wait(20)  # the old Redis lock had no socket timeout: it waited for ever
    os.kill(server.proc.pid, signal.SIGCONT)
