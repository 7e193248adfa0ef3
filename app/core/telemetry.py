"""Metrics shared by every web and worker process: counters and histograms kept in Redis.

Each gunicorn worker and each Celery worker is its own process, so per-process counters would
answer a scrape with one process's share. Every process writes here instead, and /metrics
reads it all back. Metrics are best effort: when Redis is away they are skipped, never raised;
without a Redis URL at all they stay in this process.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
PREFIX = "onloop:metrics:"
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)

# name -> (kind, help, label names)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "deliveries": ("counter", "Webhook deliveries by event and outcome", ("event", "outcome")),
    "jobs_finished": ("counter", "Jobs finished by kind and state", ("kind", "state")),
    "job_duration_seconds": ("histogram", "Job run time by kind", ("kind",)),
    "step_duration_seconds": ("histogram", "Step run time by job kind and step", ("kind", "step")),
    "sandbox_start_seconds": ("histogram", "Trigger of a sandbox to its first command", ()),
    "github_api_calls": ("counter", "GitHub REST calls by method and status", ("method", "status")),
    "github_rate_limit_remaining": ("gauge", "GitHub rate limit left, last seen", ("token",)),
    "pull_requests_opened": ("counter", "Pull requests onloop opened, by job kind", ("kind",)),
    "pull_requests_closed": ("counter", "onloop's pull requests closed, by outcome", ("outcome",)),
    "budget_stops": (
        "counter",
        "Jobs a daily budget refused (over_budget) or stopped mid-way (budget_reached)",
        ("outcome", "budget"),
    ),
}


class Telemetry:
    """Writes metrics to Redis. A process's composition root builds one and passes it down."""

    def __init__(self, url: str | None, flush_every: float | None = None) -> None:
        """`flush_every`: seconds to gather writes in this process before they go to Redis
        in one round trip (the web's intake: one per delivery was a round trip on the
        request's thread); None writes each at once."""
        self.client = (
            redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
            if url
            else None
        )
        self._down_until = 0.0
        self.local: dict[str, dict[str, float]] = {}  # without Redis: this process only
        self._local_lock = threading.Lock()
        self._flush_every = flush_every
        self._gathered: dict[tuple[str, str, str], float] = {}  # (op, key, field) -> amount
        self._flusher_pid = 0  # the process whose flusher thread runs (a fork has none)

    def read(self, key: str) -> dict[str, float]:
        """One metric's hash: label fields to values (this process's gathered writes
        included; another process's reach Redis within `flush_every`)."""
        self.flush()
        if self.client is None:
            with self._local_lock:
                return dict(self.local.get(key, {}))
        raw: dict[bytes, bytes] = self.client.hgetall(key)  # type: ignore[assignment]
        return {k.decode(): float(v) for k, v in raw.items()}

    def _write(self, *commands: tuple[str, str, str, float]) -> None:
        if self.client is None:
            with self._local_lock:
                for op, key, field, amount in commands:
                    values = self.local.setdefault(key, {})
                    values[field] = amount if op == "set" else values.get(field, 0.0) + amount
            return
        if time.monotonic() < self._down_until:
            return
        if self._flush_every is not None:
            with self._local_lock:
                for op, key, field, amount in commands:
                    at = (op, key, field)
                    kept = self._gathered.get(at, 0.0) if op == "incr" else 0.0
                    self._gathered[at] = kept + amount
                if self._flusher_pid != os.getpid():
                    self._flusher_pid = os.getpid()
                    me = weakref.ref(self)  # the thread and the exit end once it is gone
                    every = self._flush_every
                    threading.Thread(target=_flushes, args=(me, every), daemon=True).start()
                    atexit.register(_flush, me)
            return
        self._send(commands)

    def flush(self) -> None:
        """Send the writes gathered so far (see `flush_every`)."""
        if self._flush_every is None:
            return
        with self._local_lock:
            gathered, self._gathered = self._gathered, {}
        if gathered:
            self._send([(op, key, field, amount) for (op, key, field), amount in gathered.items()])

    def _send(self, commands: Sequence[tuple[str, str, str, float]]) -> None:
        assert self.client is not None
        try:
            pipe = self.client.pipeline(transaction=False)
            for op, key, field, amount in commands:
                if op == "set":
                    pipe.hset(key, field, amount)
                else:
                    pipe.hincrbyfloat(key, field, amount)
            pipe.execute()
        except redis.RedisError as exc:
            self._down_until = time.monotonic() + 10  # do not slow every request down
            log.debug("metrics skipped: %s", exc)

    @staticmethod
    def _field(labels: Mapping[str, Any]) -> str:
        return json.dumps({k: str(v) for k, v in sorted(labels.items())})

    def inc(self, name: str, amount: float = 1, **labels: Any) -> None:
        self._write(("incr", PREFIX + name, self._field(labels), amount))

    def set(self, name: str, value: float, **labels: Any) -> None:
        self._write(("set", PREFIX + name, self._field(labels), value))

    def observe(self, name: str, value: float, **labels: Any) -> None:
        field = self._field(labels)
        bucket = next((b for b in BUCKETS if value <= b), float("inf"))
        self._write(
            ("incr", PREFIX + name + ":sum", field, value),
            ("incr", PREFIX + name + ":bucket", json.dumps([field, bucket]), 1),
        )


def _flush(ref: weakref.ref[Telemetry]) -> bool:
    """Flush the Telemetry `ref` names; False once it is gone."""
    telemetry = ref()
    if telemetry is None:
        return False
    telemetry.flush()
    return True


def _flushes(ref: weakref.ref[Telemetry], every: float) -> None:
    while True:
        time.sleep(every)
        if not _flush(ref):
            return


def _labels(field: str, names: tuple[str, ...]) -> list[str]:
    data = json.loads(field)
    return [str(data.get(n, "")) for n in names]


class RedisCollector(Collector):
    """Reads every process's metrics back from Redis at scrape time."""

    def __init__(self, writer: Telemetry) -> None:
        self.writer = writer

    def collect(self) -> Iterator[Any]:
        read = self.writer.read
        try:
            raw = {
                name: (
                    read(PREFIX + name)
                    if kind != "histogram"
                    else {part: read(f"{PREFIX}{name}:{part}") for part in ("sum", "bucket")}
                )
                for name, (kind, _, _) in METRICS.items()
            }
        except redis.RedisError as exc:
            log.warning("metrics from Redis unavailable: %s", exc)
            return
        for name, (kind, text, names) in METRICS.items():
            yield from _family(f"onloop_{name}", kind, text, names, raw[name])


def _family(name: str, kind: str, text: str, names: tuple[str, ...], data: Any) -> Iterator[Any]:
    if kind == "counter":
        counter = CounterMetricFamily(name, text, labels=names)
        for field, value in data.items():
            counter.add_metric(_labels(field, names), value)
        yield counter
    elif kind == "gauge":
        gauge = GaugeMetricFamily(name, text, labels=names)
        for field, value in data.items():
            gauge.add_metric(_labels(field, names), value)
        yield gauge
    else:
        histogram = HistogramMetricFamily(name, text, labels=names)
        per_field: dict[str, dict[float, float]] = {}
        for key, value in data["bucket"].items():
            field, bound = json.loads(key)
            per_field.setdefault(field, {})[float(bound)] = value
        for field, total in data["sum"].items():
            counts = per_field.get(field, {})
            cumulative, buckets = 0.0, []
            for bound in (*BUCKETS, float("inf")):
                cumulative += counts.get(bound, 0.0)
                buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
            histogram.add_metric(_labels(field, names), buckets, total)
        yield histogram
