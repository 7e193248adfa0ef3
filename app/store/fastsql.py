"""Group commit on a raw DBAPI connection: one thread writes concurrent requests in one go."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import cache
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine

T = TypeVar("T")
Row = Sequence[Any]  # a row's values, as the driver decodes them
Step = tuple[str, Sequence[object]]  # a statement (as `Sql` gives it) and its parameters
# A request's writes, as a generator: it yields each statement and is sent back that
# statement's rows (none for a statement without RETURNING); what it returns is the answer.
Steps = Generator[Step, Sequence[Row], T]
Work = Callable[[], Steps[T]]


class Sql:
    """Dialect details for hand-written SQL that the ORM must read back unchanged.

    Statements are written with `%s` for a value and `%j` for JSON text. SQLite gets `?`
    and SQLAlchemy's DateTime text format; PostgreSQL gets a `::json` cast and datetimes.
    """

    def __init__(self, dialect: str) -> None:
        self.sqlite = dialect == "sqlite"

    @cache  # noqa: B019 - one Sql per dialect, statements are module constants
    def __call__(self, statement: str) -> str:
        if self.sqlite:
            return statement.replace("%j", "?").replace("%s", "?")
        return statement.replace("%j", "%s::json")

    def ts(self, value: datetime | None) -> Any:
        """A UTC datetime as SQLAlchemy stores it: naive text on SQLite."""
        if value is None or not self.sqlite:
            return value
        return f"{value:%Y-%m-%d %H:%M:%S.%f}"

    @staticmethod
    def json(value: Any) -> str:
        return json.dumps(value)

    @staticmethod
    def loads(value: Any) -> Any:
        """A JSON column as read back: text on SQLite, already parsed by psycopg."""
        return json.loads(value) if isinstance(value, str | bytes) else value


class _Item(Generic[T]):
    __slots__ = ("done", "error", "result", "work")

    def __init__(self, work: Work[T]) -> None:
        self.work = work
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class _Lane:
    """One committing thread and its own connection (None until its first batch)."""

    __slots__ = ("conn", "thread")

    def __init__(self) -> None:
        self.conn: Any = None
        self.thread: threading.Thread | None = None


class GroupCommit:
    """Requests hand in their writes; a committing thread (a lane) runs whatever has queued
    up in a single transaction and wakes each request only after that transaction has
    committed.

    A request's writes are a generator of statements (`Steps`), so a lane runs a batch in
    rounds: the first statement of every request, then the next of every one, and so on. On
    PostgreSQL a round's requests asking the same statement share one `executemany` in
    pipeline mode (https://www.psycopg.org/psycopg3/docs/advanced/pipeline.html): one round
    trip for the whole batch, not one for each request's every statement.

    If a batch fails, its items are retried one transaction each, so one bad request
    fails alone. SQLite writers are serialised by `lock` (the database's write lock), and
    with `sqlite` its WAL is checkpointed by a side thread, outside the lock: a checkpoint
    fsyncs, which in the committing thread would stall every waiting request. SQLite has
    one lane (one writer at a time anyway); PostgreSQL takes `lanes`, each on its own
    connection: while one lane waits for the server, another commits the requests that
    queued up meanwhile. `after_commit` runs in the lane after each committed batch, once
    its requests are woken (it must not raise; say what failed itself).
    """

    CHECKPOINT_EVERY = 100  # batches

    def __init__(
        self,
        engine: Engine,
        lock: Callable[[], AbstractContextManager[None]],
        sqlite: bool,
        lanes: int = 1,
        after_commit: Callable[[], None] | None = None,
    ) -> None:
        self._engine, self._lock, self._sqlite = engine, lock, sqlite
        self._after_commit = after_commit
        self._checkpoint_due = threading.Event()
        self._batches_since = 0
        self._cond = threading.Condition()
        self._pending: list[_Item[Any]] = []
        self._lane_count = 1 if sqlite else max(1, lanes)
        self._lanes: list[_Lane] = []
        self._pid = 0
        self._closed = False

    def run(self, work: Work[T]) -> T:
        """Run the statements of `work()` in the next batch; returns what it returned once its
        batch has committed."""
        item: _Item[T] = _Item(work)
        with self._cond:
            if self._closed:
                raise RuntimeError("database is closed")
            if not self._lanes or self._pid != os.getpid():
                self._start()
            self._pending.append(item)
            self._cond.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[return-value]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            lanes = list(self._lanes)
        if self._pid == os.getpid():
            for lane in lanes:
                if lane.thread is not None:
                    lane.thread.join(timeout=10)

    def _start(self) -> None:
        self._pid, self._pending = os.getpid(), []
        self._lanes = [_Lane() for _ in range(self._lane_count)]  # a fork's are not its own
        for i, lane in enumerate(self._lanes):
            lane.thread = threading.Thread(
                target=self._loop, args=(lane,), name=f"group-commit-{i}", daemon=True
            )
            lane.thread.start()
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

    def _batches(self) -> Iterator[list[_Item[Any]]]:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            yield batch

    def _loop(self, lane: _Lane) -> None:
        try:
            for batch in self._batches():
                self._commit(lane, batch)
        finally:
            self._drop(lane, invalidate=False)

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
            batch[0].error = exc
            batch[0].done.set()
            return
        self._batches_since += 1  # lanes race on this count only on PostgreSQL, unused there
        if self._sqlite and self._batches_since >= self.CHECKPOINT_EVERY:
            self._batches_since = 0
            self._checkpoint_due.set()
        for item, result in zip(batch, results, strict=True):
            item.result = result
            item.done.set()
        # Here, after the commit and with its requests answered, is where committed work is
        # announced (one call per batch, whatever its size).
        if self._after_commit is not None:
            self._after_commit()

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
                answers = self._execute(cursor, statement, [p for _, p in group])
                for (i, _), rows in zip(group, answers, strict=True):
                    advance(i, rows)
        return results

    def _execute(
        self, cursor: Any, statement: str, parameters: list[Sequence[object]]
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
