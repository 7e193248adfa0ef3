"""Prometheus metrics: job gauges read from the database, the rest shared through Redis."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.core.kinds import SANDBOXED
from app.core.queues import QUEUE
from app.core.settings import Settings
from app.core.telemetry import RedisCollector, Telemetry
from app.policy.budget_report import report
from app.policy.budgets import Budget
from app.policy.repo_config import ConfigError
from app.store import campaigns
from app.store.db import Database
from app.store.models import Job, Outbox


class _JobCollector(Collector):
    """Jobs by kind and state and the outbox backlog, counted in the database at scrape time."""

    def __init__(self, db: Database, writer: Telemetry) -> None:
        self.db, self.writer = db, writer

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("onloop_jobs", "Jobs by kind and state", labels=["kind", "state"])
        backlog = GaugeMetricFamily("onloop_outbox_pending", "Jobs not yet published to the queue")
        with self.db.read() as s:
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
        if self.writer.client is not None:
            queue = GaugeMetricFamily("onloop_queue_depth", "Job messages waiting in Redis")
            try:
                queue.add_metric([], float(self.writer.client.llen(QUEUE)))
                yield queue
            except Exception:  # noqa: S110 - Redis away: the gauge is left out of this scrape
                pass


class _CampaignCollector(Collector):
    """Each campaign's repositories by state, counted in the database at scrape time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        repos = GaugeMetricFamily(
            "onloop_campaign_repositories",
            "Repositories of each campaign by state",
            labels=["campaign", "campaign_state", "state"],
        )
        for name, state, repo_state, count in campaigns.counts(self.db):
            repos.add_metric([name, state, repo_state], count)
        yield repos


class _BudgetCollector(Collector):
    """Today's spend and limits per budget, repository and installation, at scrape time."""

    def __init__(self, db: Database, settings: Settings, kinds: Sequence[str]) -> None:
        self.db, self.settings, self.kinds = db, settings, kinds

    def collect(self) -> Iterator[GaugeMetricFamily]:
        names = ["budget", "scope", "name"]
        spent = GaugeMetricFamily("onloop_budget_spent", "Spent today (UTC)", labels=names)
        limit = GaugeMetricFamily("onloop_budget_limit", "Daily budget", labels=names)
        try:
            rows = report(self.db, self.settings, self.kinds)
        except ConfigError:  # the organisation file is unusable: `onloop doctor` says why
            return
        for row in rows:
            for budget in Budget:
                labels = [budget.value, row.scope.value, row.name]
                spent.add_metric(labels, row.spent.of(budget))
                if (value := row.limit(budget)) is not None:
                    limit.add_metric(labels, value)
        yield spent
        yield limit


class Metrics:
    """The registry one process exposes on /metrics, and its writer of delivery counts."""

    def __init__(
        self,
        db: Database,
        writer: Telemetry,
        settings: Settings | None = None,
        kinds: Sequence[str] = SANDBOXED,
    ) -> None:
        self.registry = CollectorRegistry()
        self.writer = writer
        self.registry.register(_JobCollector(db, self.writer))
        self.registry.register(RedisCollector(self.writer))
        self.registry.register(_CampaignCollector(db))
        if settings is not None:
            self.registry.register(_BudgetCollector(db, settings, kinds))

    def delivery(self, event: str, outcome: str) -> None:
        self.writer.inc("deliveries", event=event, outcome=outcome)
