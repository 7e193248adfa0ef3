"""The group commit's lanes on PostgreSQL: a batch waiting on the server holds up no other."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.store.db import POSTGRES_COMMIT_LANES, Database


def test_a_second_request_commits_while_the_first_batch_waits(db: Database) -> None:
    if db.sql.sqlite:
        pytest.skip("SQLite has one writer at a time, so one lane")
    assert POSTGRES_COMMIT_LANES >= 2
    first_started, second_done = threading.Event(), threading.Event()

    def first(cur: Any) -> bool:  # its batch stays open until the second has committed
        cur.execute("SELECT 1")
        first_started.set()
        return second_done.wait(timeout=20)

    def second(cur: Any) -> int:
        cur.execute("SELECT 2")
        return int(cur.fetchone()[0])

    with ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(db.group_commit.run, first)
        assert first_started.wait(timeout=20)  # so the second is in another batch
        assert db.group_commit.run(second) == 2
        second_done.set()
        assert waiting.result() is True  # it saw the second commit, not its own timeout


def test_every_request_of_many_commits_once_across_lanes(db: Database) -> None:
    def work(i: int) -> Any:
        def run(cur: Any) -> int:
            cur.execute(db.sql("SELECT %s"), (i,))
            return int(cur.fetchone()[0])

        return run

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: db.group_commit.run(work(i)), range(200)))
    assert results == list(range(200))
