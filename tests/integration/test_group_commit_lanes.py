"""The group commit: its lanes on PostgreSQL (a batch waiting on the server holds up no
other), its rounds, and its hook after a commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.store.db import POSTGRES_COMMIT_LANES, Database
from app.store.fastsql import Read, Steps


def test_a_second_request_commits_while_the_first_batch_waits(db: Database) -> None:
    if db.sql.sqlite:
        pytest.skip("SQLite has one writer at a time, so one lane")
    assert POSTGRES_COMMIT_LANES >= 2
    first_started, second_done = threading.Event(), threading.Event()

    def first() -> Steps[bool]:  # its batch stays open until the second has committed
        yield "SELECT 1", ()
        first_started.set()
        return second_done.wait(timeout=20)

    def second() -> Steps[int]:
        rows = yield "SELECT 2", ()
        return int(rows[0][0])

    with ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(db.group_commit.run, first)
        assert first_started.wait(timeout=20)  # so the second is in another batch
        assert db.group_commit.run(second) == 2
        second_done.set()
        assert waiting.result() is True  # it saw the second commit, not its own timeout


def test_every_request_of_many_commits_once_across_lanes(db: Database) -> None:
    def work(i: int) -> Callable[[], Steps[int]]:
        def run() -> Steps[int]:  # two rounds: each answer is its own request's
            rows = yield db.sql("SELECT %s"), (i,)
            rows = yield db.sql("SELECT %s * 2"), (int(rows[0][0]),)
            return int(rows[0][0]) // 2

        return run

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: db.group_commit.run(work(i)), range(200)))
    assert results == list(range(200))


def test_a_read_is_asked_once_for_each_distinct_parameters_in_a_batch(db: Database) -> None:
    """Six requests in one batch ask a `Read` with three distinct parameters: three asks,
    each request answered with its parameters' rows (`random()` tells the asks apart)."""
    lanes = 1 if db.sql.sqlite else POSTGRES_COMMIT_LANES
    holding, release = threading.Semaphore(0), threading.Event()

    def hold() -> Steps[None]:  # keeps its lane until released, so the asks queue up
        yield "SELECT 1", ()
        holding.release()
        release.wait(timeout=20)

    def ask(value: str) -> Callable[[], Steps[tuple[str, object]]]:
        def run() -> Steps[tuple[str, object]]:
            rows = yield db.sql(Read("SELECT %s, random()")), (value,)
            return str(rows[0][0]), rows[0][1]

        return run

    values = ["a", "a", "b", "a", "b", "c"]
    with ThreadPoolExecutor(lanes + len(values)) as pool:
        held = [pool.submit(db.group_commit.run, hold) for _ in range(lanes)]
        for _ in range(lanes):
            assert holding.acquire(timeout=20)
        asked = [pool.submit(db.group_commit.run, ask(v)) for v in values]
        time.sleep(1)  # every ask is queued behind the held lanes: one batch when released
        release.set()
        answers = [f.result(timeout=20) for f in asked]
        for f in held:
            f.result(timeout=20)
    assert [value for value, _ in answers] == values
    drawn = {value: {r for v, r in answers if v == value} for value in values}
    assert all(len(each) == 1 for each in drawn.values()), drawn  # asked once per value
    assert len({r for each in drawn.values() for r in each}) == 3, drawn  # three asks
