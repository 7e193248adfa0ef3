"""A job's progress feedback off its own thread: the status comment and check run are
written while the job goes on (starts its sandbox, checks out), in the order it told them."""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable


class FeedbackLane:
    """One job's queue of "steps changed" calls, run in order by a thread of its own (started
    when a call comes, ended when none is left). `settle` waits until everything queued has
    run: before the job's outcome is told, a notice is posted, or its result is recorded."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queued: deque[Callable[[], None]] = deque()
        self._busy = False  # a thread runs calls now

    def submit(self, call: Callable[[], None]) -> None:
        """Run `call` soon, in a copy of the caller's context (its logging and audit)."""
        here = contextvars.copy_context()
        with self._cond:
            self._queued.append(lambda: here.run(call))
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._drain, name="job-feedback", daemon=True).start()

    def _drain(self) -> None:
        while True:
            with self._cond:
                if not self._queued:
                    self._busy = False
                    self._cond.notify_all()
                    return
                call = self._queued.popleft()
            try:
                call()
            except Exception:  # noqa: S110 - the calls log their own failures (JobContext.tell)
                pass

    def settle(self, timeout: float = 120.0) -> bool:
        """Wait until no call is queued or running; False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)
