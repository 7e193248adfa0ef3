"""Throttled updates: the first change goes at once, later ones at most once per interval,
and the last one always goes (status comments and check runs are edited this way)."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class Throttle(Generic[T]):
    """Sends the latest value at most once per `interval`; a value held back is sent by a
    timer, so the last change always shows. `close` sends its value now and stops."""

    def __init__(self, send: Callable[[T], None], lock: threading.RLock, interval: float) -> None:
        self.send, self.lock, self.interval = send, lock, interval
        self.sent: T | None = None
        self.pending: T | None = None
        self.last = -float("inf")  # not 0: monotonic time counts from boot
        self.timer: threading.Timer | None = None
        self.closed = False

    def update(self, value: T) -> None:
        with self.lock:
            if self.closed or value == self.sent:
                return
            self.pending = value
            wait = self.last + self.interval - time.monotonic()
            if wait <= 0:
                self._flush()
            elif self.timer is None:
                # the timer runs in this context (e.g. the job's audit of GitHub writes)
                here = contextvars.copy_context()
                self.timer = threading.Timer(wait, here.run, (self._fire,))
                self.timer.daemon = True
                self.timer.start()

    def close(self, value: T | None = None) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
            self.closed = True
            if value is not None:
                self.pending = value
            self._flush()

    def _fire(self) -> None:
        with self.lock:
            self.timer = None
            if not self.closed:
                self._flush()

    def _flush(self) -> None:
        value, self.pending = self.pending, None
        if value is None or value == self.sent:
            return
        self.last = time.monotonic()
        try:
            self.send(value)
            self.sent = value
        except Exception:
            log.warning("could not update a job's progress on GitHub", exc_info=True)
