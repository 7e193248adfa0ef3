"""Teardown: what a sandbox leaves is held through the next step, then run; finish joins it."""

from __future__ import annotations

import threading

from tasks.sandbox.teardown import Teardown


def test_work_added_in_a_step_starts_when_the_next_step_ends() -> None:
    ran: list[str] = []
    teardown = Teardown()
    sandbox_step = teardown.begin()
    teardown.add("removal", lambda: ran.append("removal"))
    teardown.release(sandbox_step)
    push_step = teardown.begin()
    assert teardown.held == ["removal"] and ran == []
    teardown.release(push_step)
    assert teardown.held == []
    teardown.finish(10)
    assert ran == ["removal"]


def test_a_step_inside_another_does_not_release_what_its_own_time_added() -> None:
    teardown = Teardown()
    outer = teardown.begin()
    inner = teardown.begin()
    teardown.add("removal", lambda: None)
    teardown.release(inner)
    teardown.release(outer)
    assert teardown.held == ["removal"]
    teardown.release(teardown.begin())
    assert teardown.held == []


def test_finish_starts_what_is_held_and_waits_for_it() -> None:
    gate, done = threading.Event(), threading.Event()

    def slow() -> None:
        gate.wait(10)
        done.set()

    teardown = Teardown()
    teardown.add("before any step", slow)  # e.g. a job that failed before its next step
    threading.Timer(0.05, gate.set).start()
    teardown.finish(10)
    assert done.is_set() and teardown.held == []
