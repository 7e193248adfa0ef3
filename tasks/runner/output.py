"""A running job's sandbox output as its page shows it: each command, its output as it comes
and its exit code, kept in `job_output` (capped, tokens redacted) and announced over the
job's events."""

from __future__ import annotations

import logging
import re
import shlex
import threading
import time
from collections.abc import Callable

from app.core.jobevents import JobEvent, JobEvents
from app.store import joblog
from app.store.db import Database

log = logging.getLogger(__name__)
FLUSH_SECONDS = 0.5  # at most this long between a line and the page seeing it
FLUSH_BYTES = 64 * 1024
# A line longer than this is written in pieces, cut where no token can be (the redaction
# in joblog sees whole tokens only).
LONG_LINE = 8 * 1024
_CUT = re.compile(rb"[^A-Za-z0-9_.\-]")


def _split(partial: bytes) -> tuple[bytes, bytes]:
    """(what may be written now, what waits for the rest of its line) of a line's start."""
    end = max(partial.rfind(b"\n"), partial.rfind(b"\r"))
    if end >= 0:
        return partial[: end + 1], partial[end + 1 :]
    if len(partial) <= LONG_LINE:
        return b"", partial
    cuts = [m.end() for m in _CUT.finditer(partial)]
    at = cuts[-1] if cuts else len(partial)
    return partial[:at], partial[at:]


class OutputLog:
    """Collects one job's output and writes it in whole lines per stream (never more often
    than every half second while a command runs; always when one ends), under the step that
    ran the command. Failures are logged, never raised."""

    def __init__(
        self,
        db: Database,
        events: JobEvents,
        job_id: int,
        cap: int,
        step: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.db, self.events, self.job_id, self.cap = db, events, job_id, cap
        self.step_of = step
        self._step: str | None = None
        self._pending: list[bytes] = []
        self._partial: dict[str, bytes] = {}  # per stream: a line not ended yet
        self._size = 0
        self._last = 0.0
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def command(self, argv: list[str]) -> None:
        """A command is about to run: its line is written with its first output, when it
        ends, or within FLUSH_SECONDS, whichever comes first (not a write of its own: a
        job runs a dozen short commands, each of which waited for two writes before)."""
        self.flush(whole=True)  # anything left of the command before (usually nothing)
        self._step = self.step_of()
        shown = argv[2] if argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3 else shlex.join(argv)
        line = f"$ {shown}\n".encode()
        with self._lock:
            self._pending.append(line)
            self._size += len(line)
            self._arm()

    def ended(self, exit_code: int) -> None:
        """The command ended with `exit_code`: what is left of its output and the exit code,
        in one write."""
        with self._lock:
            self._pending.extend(p for p in self._partial.values() if p)
            self._partial = {}
            self._pending.append(f"[exit {exit_code}]\n".encode())
        self.flush()

    def _arm(self) -> None:
        """Under the lock: flush within FLUSH_SECONDS, even if the command stays quiet."""
        if self._timer is None:
            self._timer = threading.Timer(FLUSH_SECONDS, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def add(self, stream: str, data: bytes) -> None:
        """A chunk of `stream` (stdout, stderr) as it came."""
        with self._lock:
            ready, self._partial[stream] = _split(self._partial.get(stream, b"") + data)
            if ready:
                self._pending.append(ready)
                self._size += len(ready)
            due = self._size >= FLUSH_BYTES or time.monotonic() - self._last >= FLUSH_SECONDS
            if not due:  # the rest goes out shortly, even if quiet
                self._arm()
        if due:
            self.flush()

    def flush(self, whole: bool = False) -> None:
        """Write the lines collected; `whole`: the unended lines too (the command ended)."""
        with self._lock:
            if whole:
                self._pending.extend(p for p in self._partial.values() if p)
                self._partial = {}
            data, self._pending, self._size = b"".join(self._pending), [], 0
            self._last = time.monotonic()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not data:
                return
            text = data.decode("utf-8", "replace")
            try:
                joblog.append(self.db, self.job_id, text, self.cap, step=self._step)
            except Exception:
                log.warning("job %s: output not kept for its page", self.job_id, exc_info=True)
                return
        self.events.publish(self.job_id, JobEvent.OUTPUT)
