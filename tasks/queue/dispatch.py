"""The outbox dispatcher: publishes recorded jobs to Celery, so a Redis outage loses nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

from celery import Celery
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.logs import get_logger
from app.core.outbox_bell import BellListener
from app.core.queues import QUEUE, RUN_JOB
from app.core.tracing import within
from app.store.db import Database
from app.store.models import Job, JobState, Outbox, aware, utcnow
from tasks.feedback import listeners as feedback
from tasks.queue.broker import BrokerWatch
from tasks.queue.outage import Outage
from tasks.runner.context import JobContext
from tasks.runner.lease import (
    claim_given_up,
    expire_waiting,
    owner_id,
    release_given_up,
    republish_unclaimed,
    requeue_abandoned,
)
from tasks.runner.outcomes import Overdue
from tasks.runner.run import DATABASE_DOWN, why_down

log = get_logger("onloop.dispatch")


def publish_pending(db: Database, celery: Celery, batch: int = 100, traced: bool = False) -> int:
    """Publish up to `batch` outbox rows; returns how many went out.

    A row is marked published in the same transaction that holds its row lock, after the
    broker accepted the message; on PostgreSQL SKIP LOCKED lets several dispatchers share work.
    `traced` (traces on): each message goes out in its job's trace, the delivery's, so
    Celery's instrumentation carries that context in the message's headers to the worker.
    """
    sent = 0
    with db.transaction() as s:
        rows = list(
            s.scalars(
                select(Outbox)
                .where(Outbox.published_at.is_(None))
                .order_by(Outbox.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            )
        )
        parents = _traceparents(s, [row.job_id for row in rows]) if traced and rows else {}
        for row in rows:
            try:
                with within(parents.get(row.job_id)):
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
                log.warning("outbox.publish_failed", job_id=row.job_id, error=row.last_error)
                break  # the broker is down: keep order, try again later
            row.published_at = utcnow()
            sent += 1
    return sent


def _traceparents(s: Session, job_ids: list[int]) -> dict[int, str | None]:
    """The stored traceparent of each job (app.core.tracing)."""
    found = s.execute(select(Job.id, Job.traceparent).where(Job.id.in_(job_ids)))
    return {job_id: parent for job_id, parent in found}


def settle_given_up(
    context: Callable[[Job], JobContext],
    db: Database,
    owner: str,
    hold: timedelta = timedelta(minutes=5),
    max_age: timedelta = timedelta(days=1),
) -> list[int]:
    """Tell on GitHub about the jobs `requeue_abandoned` gave up on: their status comment
    (edited in place) and check run `onloop/<kind>` end as failed, as any failed job's do,
    through `context(job)` (the worker's JobRunner.context). Outside any transaction; a job
    whose GitHub calls fail is tried again after `hold`, for `max_age` at most. The ids of
    the jobs settled now."""
    settled = []
    for job in claim_given_up(db, owner, hold):
        about = {"job_id": job.id, "repo": job.repo, "kind": job.kind, "number": job.number}
        if (aware(job.finished_at) or utcnow()) < utcnow() - max_age:
            release_given_up(db, job.id, owner)
            log.error("job.given_up_untold", detail="gave up telling GitHub", **about)
            continue
        try:
            job_ctx = context(job)
            result = dict(job.result or {})
            overdue = result.get("outcome") in set(Overdue)  # the watchdog's, not a death's
            feedback.settle(job_ctx, JobState.FAILED, result, strict=True, post=overdue)
        except Exception as exc:
            log.warning(
                "job.given_up_settle_failed",
                detail="could not settle its feedback on GitHub; trying again later",
                error=f"{type(exc).__name__}: {exc}",
                **about,
            )
            continue
        if release_given_up(db, job.id, owner):
            settled.append(job.id)
            # the person was told on GitHub; the operator learns it here
            log.error(
                "job.overdue" if overdue else "job.given_up",
                detail=(
                    f"the watchdog gave it up: {result.get('outcome')}"
                    if overdue
                    else "its worker stopped every time it ran it"
                ),
                attempts=job.attempts,
                error=result.get("error"),
                **about,
            )
    return settled


class Dispatcher:
    """A thread that drains the outbox and requeues abandoned jobs, until stopped."""

    def __init__(
        self,
        db: Database,
        celery: Celery,
        context: Callable[[Job], JobContext],
        interval: float = 0.5,
        republish_after: timedelta = timedelta(minutes=2),
        authorization_wait: timedelta = timedelta(hours=24),
        housekeeping: Callable[[], object] | None = None,
        housekeeping_interval: float = 300.0,
        watchdog: Callable[[], object] | None = None,
        watchdog_interval: float = 60.0,
        broker: BrokerWatch | None = None,
        broker_interval: float = 1.0,
        traced: bool = False,
        bell: BellListener | None = None,
        campaigns: Callable[[], object] | None = None,
        campaigns_interval: float = 1.0,
    ) -> None:
        self.bell = bell  # intake's ring ends a wait early; the poll stays the safety net
        self.context = context  # a given-up job's context, for its GitHub calls
        self.traced = traced  # traces on: messages go out in their jobs' traces
        self.owner = owner_id()
        self.authorization_wait = authorization_wait
        self.housekeeping, self.housekeeping_interval = housekeeping, housekeeping_interval
        self._last_housekeeping = -housekeeping_interval  # the first sweep runs at start
        self.watchdog, self.watchdog_interval = watchdog, watchdog_interval  # tasks.queue.watchdog
        self._last_watchdog = -watchdog_interval  # so does the watchdog's
        self.db, self.celery, self.interval = db, celery, interval
        self.republish_after = republish_after  # ONLOOP_REPUBLISH_AFTER
        self.outage = Outage("dispatcher")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name="onloop-dispatcher", daemon=True)
        self._last_recovery = 0.0
        self.broker, self.broker_interval = broker, broker_interval
        # The campaigns asked to advance (tasks/queue/campaigns.py), looked at this often.
        self.campaigns, self.campaigns_interval = campaigns, campaigns_interval
        self._last_campaigns = -campaigns_interval
        self._last_broker_look = -broker_interval
        # Why messages may have been lost and not yet sent again (None: none were).
        self._recover: str | None = None

    def step(self) -> int:
        now = time.monotonic()
        self._watch_broker(now)
        if self._recover is not None:
            self.recover()
        if self.housekeeping and now - self._last_housekeeping >= self.housekeeping_interval:
            self._last_housekeeping = now
            try:
                self.housekeeping()
            except DATABASE_DOWN as exc:
                self.outage.noticed(why_down(exc))
            except Exception as exc:
                log.warning("dispatch.housekeeping_failed", error=f"{type(exc).__name__}: {exc}")
        if self.watchdog and now - self._last_watchdog >= self.watchdog_interval:
            self._last_watchdog = now
            try:  # its own errors are logged by it; a database outage is the loop's
                self.watchdog()
            except DATABASE_DOWN as exc:
                self.outage.noticed(why_down(exc))
            except Exception as exc:
                log.warning("dispatch.watchdog_failed", error=f"{type(exc).__name__}: {exc}")
        if self.campaigns and now - self._last_campaigns >= self.campaigns_interval:
            self._last_campaigns = now
            try:  # a campaign's trouble must not hold up the outbox
                self.campaigns()
            except DATABASE_DOWN as exc:
                self.outage.noticed(why_down(exc))
            except Exception as exc:
                log.warning("dispatch.campaigns_failed", error=f"{type(exc).__name__}: {exc}")
        if now - self._last_recovery > 5:
            self._last_recovery = now
            requeued = requeue_abandoned(self.db)
            if requeued:
                log.warning("dispatch.requeued_abandoned", jobs=requeued)
            republished = republish_unclaimed(self.db, self.republish_after)
            if republished:
                log.warning("dispatch.republished_unclaimed", jobs=republished)
            expired = expire_waiting(self.db, self.authorization_wait)
            if expired:
                log.info("dispatch.authorization_expired", jobs=expired)
            try:  # GitHub's trouble must not hold up the outbox
                settle_given_up(self.context, self.db, self.owner)
            except Exception as exc:
                log.warning("dispatch.settle_given_up_failed", error=f"{type(exc).__name__}: {exc}")
        return publish_pending(self.db, self.celery, traced=self.traced)

    def _watch_broker(self, now: float) -> None:
        """Look at the broker once a `broker_interval`; when it came back, restarted or lost
        its data, the messages of queued jobs may be gone: recover them now, not at the sweep."""
        if self.broker is None or now - self._last_broker_look < self.broker_interval:
            return
        self._last_broker_look = now
        change = self.broker.look()
        if change.may_have_lost_messages:
            log.warning("broker.changed", change=change.value)
            self._recover = f"broker {change.value}"

    def recover(self) -> list[int]:
        """Publish again every queued job that was published but that the broker holds no
        message for (neither queued nor delivered to a worker). A duplicate is harmless: a
        queued job is claimed once. Without a broker to look into, every such job."""
        reason = self._recover or "asked"
        held: set[int] = set()
        if self.broker is not None:
            try:
                held = self.broker.job_ids_held()
            except Exception as exc:  # not answering yet: the next step tries again
                log.info("broker.unreadable", error=f"{type(exc).__name__}: {exc}")
                return []
        republished = republish_unclaimed(self.db, timedelta(0), held)
        self._recover = None
        if republished:
            log.warning("dispatch.republished_lost", reason=reason, jobs=republished)
        return republished

    def run(self) -> None:
        backoff = self.interval
        while not self._stop.is_set():
            try:
                sent = self.step()
                backoff = self.interval
                if self.outage.over():  # a message taken meanwhile may be lost: look now
                    self._recover = self._recover or "database back"
            except DATABASE_DOWN as exc:  # logged once; asked again soon after it is back
                self.outage.noticed(why_down(exc))
                sent, backoff = 0, min(backoff * 2, 2.0)
            except Exception as exc:
                log.warning("dispatch.failed", error=f"{type(exc).__name__}: {exc}")
                sent, backoff = 0, min(backoff * 2, 10.0)
            if not sent:
                self._wait(backoff)
        if self.bell is not None:
            self.bell.close()

    def _wait(self, seconds: float) -> None:
        """Until the next look at the outbox: `seconds`, or less when intake rings."""
        if self.bell is None:
            self._stop.wait(seconds)
        else:
            self.bell.wait(seconds, self._stop)

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
