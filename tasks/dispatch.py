"""The outbox dispatcher: publishes recorded jobs to Celery, so a Redis outage loses nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

from celery import Celery
from sqlalchemy import select

from app.db import Database
from app.logs import get_logger
from app.models import Outbox, utcnow
from tasks.celery_app import QUEUE, RUN_JOB
from tasks.lease import expire_waiting, republish_unclaimed, requeue_abandoned

log = get_logger("onloop.dispatch")


def publish_pending(db: Database, celery: Celery, batch: int = 100) -> int:
    """Publish up to `batch` outbox rows; returns how many went out.

    A row is marked published in the same transaction that holds its row lock, after the
    broker accepted the message; on PostgreSQL SKIP LOCKED lets several dispatchers share work.
    """
    sent = 0
    with db.session() as s:
        rows = list(
            s.scalars(
                select(Outbox)
                .where(Outbox.published_at.is_(None))
                .order_by(Outbox.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            )
        )
        for row in rows:
            try:
                celery.send_task(
                    RUN_JOB,
                    args=[row.job_id],
                    queue=QUEUE,
                    task_id=f"job-{row.job_id}-{row.id}",
                    retry=False,
                )
            except Exception as exc:
                row.publish_attempts += 1
                row.last_error = f"{type(exc).__name__}: {exc}"[:500]
                log.warning("publish failed", job_id=row.job_id, error=row.last_error)
                break  # the broker is down: keep order, try again later
            row.published_at = utcnow()
            sent += 1
    return sent


class Dispatcher:
    """A thread that drains the outbox and requeues abandoned jobs, until stopped."""

    def __init__(
        self,
        db: Database,
        celery: Celery,
        interval: float = 0.5,
        republish_after: timedelta = timedelta(minutes=10),
        authorization_wait: timedelta = timedelta(hours=24),
        housekeeping: Callable[[], object] | None = None,
        housekeeping_interval: float = 300.0,
    ) -> None:
        self.authorization_wait = authorization_wait
        self.housekeeping, self.housekeeping_interval = housekeeping, housekeeping_interval
        self._last_housekeeping = -housekeeping_interval  # the first sweep runs at start
        self.db, self.celery, self.interval = db, celery, interval
        self.republish_after = republish_after
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name="onloop-dispatcher", daemon=True)
        self._last_recovery = 0.0

    def step(self) -> int:
        now = time.monotonic()
        if self.housekeeping and now - self._last_housekeeping >= self.housekeeping_interval:
            self._last_housekeeping = now
            try:
                self.housekeeping()
            except Exception as exc:
                log.warning("housekeeping failed", error=f"{type(exc).__name__}: {exc}")
        if now - self._last_recovery > 5:
            self._last_recovery = now
            requeued = requeue_abandoned(self.db)
            if requeued:
                log.warning("requeued abandoned jobs", jobs=requeued)
            republished = republish_unclaimed(self.db, self.republish_after)
            if republished:
                log.warning("republished unclaimed jobs", jobs=republished)
            expired = expire_waiting(self.db, self.authorization_wait)
            if expired:
                log.info("stopped waiting for authorisation", jobs=expired)
        return publish_pending(self.db, self.celery)

    def run(self) -> None:
        backoff = self.interval
        while not self._stop.is_set():
            try:
                sent = self.step()
                backoff = self.interval
            except Exception as exc:
                log.warning("dispatcher error", error=f"{type(exc).__name__}: {exc}")
                sent, backoff = 0, min(backoff * 2, 10.0)
            if not sent:
                self._stop.wait(backoff)

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
