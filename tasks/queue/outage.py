"""A database outage as the worker logs it: one line when it starts, one when it ends."""

from __future__ import annotations

import threading
import time

from app.core.logs import get_logger

log = get_logger("onloop.outage")


class Outage:
    """Whether the database answered `who` last time. However many jobs or sweeps meet the
    outage, it is logged once when noticed and once when over, with how long it lasted."""

    def __init__(self, who: str) -> None:
        self.who = who
        self._lock = threading.Lock()
        self._since: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def noticed(self, error: str) -> None:
        """The database did not answer; `error` is its one-line reason."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        log.warning(
            "database.unavailable",
            who=self.who,
            error=error,
            detail="onloop waits and asks again; no job message is acknowledged unread",
        )

    def over(self) -> bool:
        """The database answered; True when that ends an outage."""
        if self._since is None:  # the common case, without the lock
            return False
        with self._lock:
            since, self._since = self._since, None
        if since is None:
            return False
        log.info(
            "database.available", who=self.who, after_seconds=round(time.monotonic() - since, 1)
        )
        return True
