"""The status comment's throttle: the first change goes at once, later ones at most once per
interval, and the last one always goes."""

from __future__ import annotations

import threading

from tasks.feedback.throttle import Throttle
from tests.doubles.worker_proc import wait_until


def test_changes_within_the_interval_wait_and_close_sends_the_last() -> None:
    sent: list[str] = []
    throttle: Throttle[str] = Throttle(sent.append, threading.RLock(), interval=3600)
    for value in ("queued", "step 1", "step 2", "step 2"):
        throttle.update(value)
    assert sent == ["queued"]  # the rest are held back (an hour is far away)
    throttle.close("done")
    throttle.update("late")
    assert sent == ["queued", "done"]


def test_a_held_change_is_sent_by_the_timer() -> None:
    sent: list[str] = []
    throttle: Throttle[str] = Throttle(sent.append, threading.RLock(), interval=0.5)
    throttle.update("step 1")
    throttle.update("step 2")
    throttle.update("step 3")
    wait_until(lambda: sent[-1] == "step 3", 10, "the held change")
    assert sent == ["step 1", "step 3"]
    throttle.close()
    assert sent == ["step 1", "step 3"]


def test_a_failed_send_is_tried_again_with_the_next_change() -> None:
    sent: list[str] = []

    def flaky(value: str) -> None:
        if value == "boom":
            raise RuntimeError("GitHub said 502")
        sent.append(value)

    throttle: Throttle[str] = Throttle(flaky, threading.RLock(), interval=0)
    throttle.update("boom")
    throttle.update("fine")
    throttle.close("done")
    assert sent == ["fine", "done"]
