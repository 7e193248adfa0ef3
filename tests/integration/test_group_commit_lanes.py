"""The group commit: its lanes on PostgreSQL (a batch waiting on the server holds up no
other), its rounds, and its hook after a commit."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from app.store.db import POSTGRES_COMMIT_LANES, Database
from app.store.fastsql import Steps
from app.store.models import utcnow


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


def test_after_commit_runs_once_a_batch_is_committed(database_url: str) -> None:
    """The hook of a committed batch (where the dispatcher is to be woken) runs after the
    commit, so another connection sees the batch's rows; once a batch, so at most once a
    request."""
    seen: list[int] = []
    db = Database(database_url, after_commit=lambda: seen.append(_requests(db)))
    try:

        def work(i: int) -> Callable[[], Steps[None]]:
            def run() -> Steps[None]:
                yield db.sql(NOTE), (f"after-commit-{i}", db.sql.ts(utcnow()))

            return run

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: db.group_commit.run(work(i)), range(40)))
        assert 1 <= len(seen) <= 40
        assert max(seen) == 40  # the last batch's hook ran after all 40 had committed
    finally:
        db.dispose()


NOTE = "INSERT INTO redelivery_requests (guid, requested_at) VALUES (%s, %s)"


def _requests(db: Database) -> int:
    with db.read() as session:
        return int(session.execute(text(COUNT)).scalar_one())


COUNT = "SELECT count(*) FROM redelivery_requests WHERE guid LIKE 'after-commit-%'"
