"""A running job's sandbox output as its page shows it: each command, its output as it comes
and its exit code, kept in `job_output` (capped) and announced over the job's events."""

from __future__ import annotations

import logging
import shlex
import threading
import time

from app.core.jobevents import JobEvent, JobEvents
from app.store import joblog
from app.store.db import Database

log = logging.getLogger(__name__)
FLUSH_SECONDS = 0.5  # at most this long between a chunk and the page seeing it
FLUSH_BYTES = 64 * 1024


class OutputLog:
    """Collects one job's output and writes it in chunks (never more often than every half
    second while a command runs; always when one ends). Failures are logged, never raised."""

    def __init__(self, db: Database, events: JobEvents, job_id: int, cap: int) -> None:
        self.db, self.events, self.job_id, self.cap = db, events, job_id, cap
        self._pending: list[bytes] = []
        self._size = 0
        self._last = 0.0
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def command(self, argv: list[str]) -> None:
        """A command is about to run."""
        shown = argv[2] if argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3 else shlex.join(argv)
        self.add(f"$ {shown}\n".encode())
        self.flush()

    def ended(self, exit_code: int) -> None:
        """The command ended with `exit_code`."""
        self.add(f"[exit {exit_code}]\n".encode())
        self.flush()

    def add(self, data: bytes) -> None:
        with self._lock:
            self._pending.append(data)
            self._size += len(data)
            due = self._size >= FLUSH_BYTES or time.monotonic() - self._last >= FLUSH_SECONDS
            if not due and self._timer is None:  # the rest goes out shortly, even if quiet
                self._timer = threading.Timer(FLUSH_SECONDS, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            data, self._pending, self._size = b"".join(self._pending), [], 0
            self._last = time.monotonic()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not data:
                return
            try:
                joblog.append(self.db, self.job_id, data.decode("utf-8", "replace"), self.cap)
            except Exception:
                log.warning("job %s: output not kept for its page", self.job_id, exc_info=True)
                return
        self.events.publish(self.job_id, JobEvent.OUTPUT)
