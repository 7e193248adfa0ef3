"""What the app factory builds once and every request shares: settings, database, metrics."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import structlog
from flask import Flask
from opentelemetry.trace import Tracer

from app.core.kinds import Kinds
from app.core.outbox_bell import OutboxBell
from app.core.settings import Settings
from app.store.db import Database
from app.web.metrics import Metrics

EXTENSION = "onloop"


def _first_line(error: BaseException) -> str:
    """What went wrong, without the statement and parameters SQLAlchemy appends."""
    cause = getattr(error, "orig", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0][:300] if text else ''}"


@dataclass
class DatabaseOutage:
    """Whether intake found the database unreachable: one log line when an outage starts and
    one when it ends, however many deliveries it answers 503 in between (per web process)."""

    since: float | None = None  # time.monotonic() of the first failure
    answered: int = 0  # deliveries answered 503 in this outage
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def failed(self, error: BaseException, log: structlog.stdlib.BoundLogger) -> None:
        with self._lock:
            self.answered += 1
            if self.since is not None:
                return
            self.since = time.monotonic()
        log.error("database.unavailable", error=_first_line(error), answer=503)

    def recovered(self, log: structlog.stdlib.BoundLogger) -> None:
        if self.since is None:  # the usual case: no lock taken
            return
        with self._lock:
            if self.since is None:
                return
            seconds, answered = time.monotonic() - self.since, self.answered
            self.since, self.answered = None, 0
        log.warning("database.available", outage_seconds=round(seconds, 1), answered_503=answered)


@dataclass
class Onloop:
    settings: Settings
    db: Database
    metrics: Metrics
    log: structlog.stdlib.BoundLogger
    kinds: Kinds  # the job kinds `decide` may route to
    tracer: Tracer | None = None  # None while traces are off: intake does no span work
    db_outage: DatabaseOutage = field(default_factory=DatabaseOutage)
    bell: OutboxBell = field(default_factory=lambda: OutboxBell(None))  # wakes the dispatcher


def onloop(app: Flask) -> Onloop:
    state: Onloop = app.extensions[EXTENSION]
    return state
