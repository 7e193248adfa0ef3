"""Database engine and sessions: one engine per settings, built by the app factory or worker."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, Engine, Result, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.store.fastsql import Sql
from app.store.groupcommit import GroupCommit

# Intake's committing connections per web process on PostgreSQL (app.store.groupcommit):
# with 1, requests queue behind the batch waiting for the server; 3 took intake on 2 cores
# from ~460 to ~630 deliveries/s (bench/intake.py), 6 no further. With a batch's statements
# in one round trip each (executemany), 2, 4 and 6 were within the machine's noise.
# Each holds one connection of the pool below.
POSTGRES_COMMIT_LANES = 4


def rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE matched. `Session.execute` is typed to return a plain
    Result; for those statements it is a CursorResult, which has the count."""
    assert isinstance(result, CursorResult)
    return int(result.rowcount)


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets its directory, WAL and a busy timeout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            # WAL with synchronous=NORMAL survives a crash of onloop; only power loss can
            # drop the last commits. Production runs on PostgreSQL.
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class Database:
    """An engine, its session factory and the webhook intake's group committer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        parsed = make_url(url)
        self._lock_path: Path | None = None
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            self._lock_path = Path(f"{parsed.database}.write-lock")
        self._thread_lock = threading.Lock()
        self.sql = Sql(parsed.get_backend_name())
        self.group_commit = GroupCommit(
            self.engine,
            self.write_lock,
            self.sql.sqlite,
            lanes=POSTGRES_COMMIT_LANES,
        )

    @contextmanager
    def write_lock(self) -> Iterator[None]:
        """Serialise SQLite writers across threads and processes.

        SQLite allows one writer; waiting writers otherwise sleep in its busy handler with
        growing back-off, which is what makes tail latency bad. A flock wakes the next writer
        at once. PostgreSQL needs none of this.
        """
        if self._lock_path is None:
            yield
            return
        with self._thread_lock, open(self._lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read(self) -> Session:
        """A session for reading (use it in `with`): nothing it does is committed."""
        return self._sessions()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with self._sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    def dispose(self) -> None:
        self.group_commit.close()
        self.engine.dispose()
