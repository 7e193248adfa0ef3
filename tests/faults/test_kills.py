"""A worker SIGKILLed with jobs running and queued, and the web's gunicorn master SIGKILLed
under load: what was acknowledged runs once, and what was not is delivered again and runs."""

from __future__ import annotations

import time

import pytest

from app.store.models import JobState
from tests.doubles.worker_proc import wait_until
from tests.faults.harness import Stack, scale
from tests.faults.runs import RATE, run

pytestmark = pytest.mark.faults


# The messages the killed worker had taken but not started die with it, and wait for the
# sweep that publishes a still-queued job again: 20 s here, to keep the run short (with the
# default 120 s the drain is about two minutes; /work/notes/faults-docs.md has the figures).
REPUBLISH_AFTER = 20


@pytest.mark.parametrize("stack_overrides", [{"republish_after": REPUBLISH_AFTER}])
def test_worker_killed_with_jobs_running_and_queued(stack: Stack) -> None:
    seen: list[dict[str, int]] = []

    def kill() -> None:
        def busy() -> bool:
            states = stack.states()
            return states[JobState.RUNNING] >= 1 and states[JobState.QUEUED] >= 2

        wait_until(busy, 60, "jobs running and queued")
        assert stack.worker is not None
        stack.worker.kill()
        seen.append(dict(stack.states()))
        stack.start_worker()

    found = run(stack, f"worker SIGKILL (republish after {REPUBLISH_AFTER} s)", kill, rate=None)
    assert found.lost == 0 and found.duplicated == 0, stack.logs()
    (at_kill,) = seen
    assert at_kill[JobState.RUNNING] >= 1 and at_kill[JobState.QUEUED] >= 1, at_kill


def test_web_master_killed_under_load(stack: Stack) -> None:
    sender = stack.sender()
    cut: list[float] = []

    def kill() -> None:
        wait_until(lambda: len(sender.acknowledged_guids()) >= scale() // 3, 60, "the load")
        assert stack.web is not None
        cut.append(time.time())
        stack.web.kill_master()
        stack.web.start()  # on the same port: the sender goes on as GitHub would
        cut.append(time.time())

    found = run(stack, "web master SIGKILL", kill, sender=sender, rate=RATE)
    assert found.lost == 0 and found.duplicated == 0, stack.logs()
    assert found.acknowledged == found.sent  # the refused ones, delivered again
    assert cut and sender.refused(), "nothing met the web while it was down"
