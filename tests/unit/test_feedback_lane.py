"""A job's feedback lane runs its calls off the job's thread, in order, in the caller's
context; `settle` returns once all of them have run."""

from __future__ import annotations

import contextvars
import threading

from tasks.runner.feedback_lane import FeedbackLane

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_calls_run_in_order_in_the_callers_context_and_settle_waits_for_them() -> None:
    lane, gate = FeedbackLane(), threading.Event()
    seen: list[tuple[int, str, bool]] = []
    job_thread = threading.current_thread()

    def call(n: int) -> None:
        gate.wait(10)  # the first call holds the lane: the others queue up behind it
        seen.append((n, WHO.get(), threading.current_thread() is job_thread))

    WHO.set("job-7")
    for n in range(5):
        lane.submit(lambda n=n: call(n))  # type: ignore[misc]
    assert seen == []  # submitting did not wait for any of them
    gate.set()
    assert lane.settle(10)
    assert seen == [(n, "job-7", False) for n in range(5)]


def test_a_failing_call_does_not_stop_the_lane() -> None:
    lane, seen = FeedbackLane(), []

    def boom() -> None:
        raise RuntimeError("GitHub said no")

    lane.submit(boom)
    lane.submit(lambda: seen.append("after"))
    assert lane.settle(10) and seen == ["after"]
