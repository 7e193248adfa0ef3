"""Prometheus metrics: counters kept per process, job gauges read from the database."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.db import Database
from app.models import Job, Outbox


class _JobCollector(Collector):
    """Jobs by kind and state and the outbox backlog, counted in the database at scrape time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("onloop_jobs", "Jobs by kind and state", labels=["kind", "state"])
        backlog = GaugeMetricFamily("onloop_outbox_pending", "Jobs not yet published to the queue")
        with self.db.sessions() as s:
            rows = s.execute(
                select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state)
            )
            for kind, state, count in rows:
                jobs.add_metric([kind, state], count)
            pending = s.scalar(
                select(func.count()).select_from(Outbox).where(Outbox.published_at.is_(None))
            )
            backlog.add_metric([], pending or 0)
        yield jobs
        yield backlog


class Metrics:
    """The registry one process exposes on /metrics."""

    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.deliveries = Counter(
            "onloop_deliveries",
            "Webhook deliveries by event and outcome",
            ["event", "outcome"],
            registry=self.registry,
        )
        self.registry.register(_JobCollector(db))
