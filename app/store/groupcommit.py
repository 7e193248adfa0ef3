"""Group commit on raw DBAPI connections: concurrent requests' writes in one transaction."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine

from app.store.fastsql import Read, Row, Step, Work

T = TypeVar("T")


class _Item(Generic[T]):
    __slots__ = ("error", "finished", "lane", "result", "wake", "work")

    def __init__(self, work: Work[T]) -> None:
        self.work = work
        self.wake = threading.Event()  # finished, or handed a lane to commit with
        self.finished = False
        self.lane: _Lane | None = None
        self.result: T | None = None
        self.error: BaseException | None = None


class _Lane:
    """One committer's turn: its own connection (None until its first batch)."""

    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Any = None


class GroupCommit:
    """Requests hand in their writes; a request holding a lane commits whatever has queued up
    (its own writes and others') in a single transaction, and each request returns only
    after that transaction has committed.

    There is no committing thread: a request that finds a lane free commits with it, the
    others wait; when a batch is done and more requests have queued up, its lane goes to
    the first of them. Handing work to a committing thread and back cost two wake-ups a
    request: 14-24 % of the web workers' Python time on 2 cores (`py-spy record --gil`).

    A request's writes are a generator of statements (`app.store.fastsql.Steps`), so a
    batch runs in rounds: the first statement of every request, then the next of every
    one, and so on. A `Read` statement is asked once for each distinct set of parameters in
    a round (a burst for one repository reads its config once). On PostgreSQL a round's
    requests asking the same statement share one
    `executemany` in pipeline mode
    (https://www.psycopg.org/psycopg3/docs/advanced/pipeline.html): one round trip for the
    whole batch, not one for each request's every statement.

    If a batch fails, its items are retried one transaction each, so one bad request
    fails alone. SQLite writers are serialised by `lock` (the database's write lock), and
    with `sqlite` its WAL is checkpointed by a side thread, outside the lock: a checkpoint
    fsyncs, which in the committing request would stall every waiting one. SQLite has one
    lane (one writer at a time anyway); PostgreSQL takes `lanes`, each with its own
    connection: while one batch waits for the server, another commits the requests that
    queued up meanwhile.
    """

    CHECKPOINT_EVERY = 100  # batches

    def __init__(
        self,
        engine: Engine,
        lock: Callable[[], AbstractContextManager[None]],
        sqlite: bool,
        lanes: int = 1,
    ) -> None:
        self._engine, self._lock, self._sqlite = engine, lock, sqlite
        self._checkpoint_due = threading.Event()
        self._batches_since = 0
        self._cond = threading.Lock()
        self._pending: list[_Item[Any]] = []
        self._lane_count = 1 if sqlite else max(1, lanes)
        self._free: list[_Lane] = []
        self._lanes: list[_Lane] = []
        self._pid = 0
        self._closed = False

    def run(self, work: Work[T]) -> T:
        """Run the statements of `work()` in the next batch; returns what it returned once
        its batch has committed."""
        item: _Item[T] = _Item(work)
        with self._cond:
            if self._closed:
                raise RuntimeError("database is closed")
            if not self._lanes or self._pid != os.getpid():
                self._start()
            self._pending.append(item)
            lane = self._free.pop() if self._free else None
        while True:
            if lane is not None:
                self._lead(lane)
            item.wake.wait()
            with self._cond:
                lane, item.lane = item.lane, None  # handed a lane: commit the queue
                if item.finished:
                    if lane is not None:  # committed by another meanwhile
                        self._pass_on(lane)
                    break
                item.wake.clear()
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[return-value]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            free, self._free = self._free, []
        if self._pid == os.getpid():
            for lane in free:
                self._drop(lane, invalidate=False)

    def _start(self) -> None:
        self._pid, self._pending = os.getpid(), []
        self._lanes = [_Lane() for _ in range(self._lane_count)]  # a fork's are not its own
        self._free = list(self._lanes)
        if self._sqlite:
            threading.Thread(target=self._checkpoints, name="wal-checkpoint", daemon=True).start()

    def _checkpoints(self) -> None:
        while not self._closed:
            if not self._checkpoint_due.wait(timeout=1.0):
                continue
            self._checkpoint_due.clear()
            try:
                conn = self._engine.raw_connection()
                try:
                    conn.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                finally:
                    conn.close()
            except Exception:  # noqa: S112 - the next batch asks again; SQLite would too
                continue

    def _lead(self, lane: _Lane) -> None:
        """Commit what has queued up with `lane`, then hand it on (or free it)."""
        with self._cond:
            batch, self._pending = self._pending, []
        if batch:
            self._commit(lane, batch)
        with self._cond:
            self._pass_on(lane)

    def _pass_on(self, lane: _Lane) -> None:
        """(Under the lock.) `lane` to the first waiting request without one, else free."""
        if self._closed:
            self._drop(lane, invalidate=False)
            return
        waiting = next((item for item in self._pending if item.lane is None), None)
        if waiting is None:
            self._free.append(lane)
            return
        waiting.lane = lane
        waiting.wake.set()

    def _commit(self, lane: _Lane, batch: list[_Item[Any]]) -> None:
        try:
            with self._lock():
                if lane.conn is None:
                    lane.conn = self._connect()
                cursor = lane.conn.cursor()
                if self._sqlite:
                    cursor.execute("BEGIN IMMEDIATE")
                results = self._drive(cursor, [item.work for item in batch])
                lane.conn.commit()
        except BaseException as exc:  # handed to the waiting request
            self._rollback(lane)
            if len(batch) > 1:
                for item in batch:
                    self._commit(lane, [item])
                return
            self._finish(batch, [None], exc)
            return
        self._batches_since += 1  # lanes race on this count only on PostgreSQL, unused there
        if self._sqlite and self._batches_since >= self.CHECKPOINT_EVERY:
            self._batches_since = 0
            self._checkpoint_due.set()
        self._finish(batch, results, None)

    def _finish(
        self, batch: list[_Item[Any]], results: list[Any], error: BaseException | None
    ) -> None:
        with self._cond:  # so a waiter never misses its wake-up (see `run`)
            for item, result in zip(batch, results, strict=True):
                item.result, item.error, item.finished = result, error, True
                item.wake.set()

    def _drive(self, cursor: Any, works: list[Work[Any]]) -> list[Any]:
        """Each work's generator to its end, in rounds of one statement each (see the class
        docstring); their answers, in order."""
        runs = [work() for work in works]
        results: list[Any] = [None] * len(runs)
        asked: list[tuple[int, Step]] = []

        def advance(i: int, rows: Sequence[Row] | None) -> None:
            try:
                asked.append((i, runs[i].send(rows)))  # type: ignore[arg-type]
            except StopIteration as stop:
                results[i] = stop.value

        for i in range(len(runs)):
            advance(i, None)
        while asked:
            groups: dict[str, list[tuple[int, Sequence[object]]]] = {}
            for i, (statement, parameters) in asked:
                groups.setdefault(statement, []).append((i, parameters))
            asked = []
            for statement, group in groups.items():
                if isinstance(statement, Read):  # once for each distinct set of parameters
                    distinct = list(dict.fromkeys(tuple(p) for _, p in group))
                    rows_of = self._execute(cursor, statement, distinct)
                    found = dict(zip(distinct, rows_of, strict=True))
                    answers = [found[tuple(p)] for _, p in group]
                else:
                    answers = self._execute(cursor, statement, [p for _, p in group])
                for (i, _), rows in zip(group, answers, strict=True):
                    advance(i, rows)
        return results

    def _execute(
        self, cursor: Any, statement: str, parameters: Sequence[Sequence[object]]
    ) -> list[Sequence[Row]]:
        """`statement` once per parameter set; the rows of each (none without RETURNING)."""
        if self._sqlite or len(parameters) == 1:
            answers = []
            for values in parameters:
                cursor.execute(statement, values)
                answers.append(cursor.fetchall() if cursor.description else [])
            return answers
        # https://www.psycopg.org/psycopg3/docs/api/cursors.html#psycopg.Cursor.executemany
        cursor.executemany(statement, parameters, returning=True)
        answers = []
        while True:
            answers.append(cursor.fetchall() if cursor.description else [])
            if not cursor.nextset():
                return answers

    def _connect(self) -> Any:
        conn = self._engine.raw_connection()
        if self._sqlite:  # checkpoints run in the side thread (see the class docstring)
            conn.cursor().execute("PRAGMA wal_autocheckpoint=0")
        return conn

    def _rollback(self, lane: _Lane) -> None:
        if lane.conn is None:
            return
        try:
            lane.conn.rollback()
        except Exception:  # a broken connection is replaced
            self._drop(lane, invalidate=True)

    def _drop(self, lane: _Lane, invalidate: bool) -> None:
        conn, lane.conn = lane.conn, None
        if conn is None:
            return
        try:
            if invalidate:
                conn.invalidate()
                return
            if self._sqlite:  # back in the pool: SQLite's own checkpoints again
                conn.cursor().execute("PRAGMA wal_autocheckpoint=1000")
            conn.close()
        except Exception:  # noqa: S110 - closing a dead connection
            pass
