"""The group commit: its lanes on PostgreSQL (a batch waiting on the server holds up no
other), its rounds, and its hook after a commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.store.db import POSTGRES_COMMIT_LANES, Database
from app.store.fastsql import Steps


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
