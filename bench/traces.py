"""Where a job's time goes: bench/e2e.py's four job kinds traced, each span's self time as a
share of the trace, from the webhook's request to the job's end.

The web app (in this process) and a real `onloop worker` export their spans over OTLP/HTTP
to the collector double (tests/doubles/otlp_collector.py), switched on by
OTEL_EXPORTER_OTLP_ENDPOINT alone. A span's self time is its length less the time its
children cover; the hand-offs between processes are the gaps between spans: the outbox wait
(the delivery span's end to the dispatcher's send) and Celery's (the send's end to the run's
start). Shares are of the total; they are ratios of one run on this machine, not absolute
claims. `--timeline` also prints each kind's last run span by span, in the order they
started (ms from the webhook, length, nesting): where a job waits on what.
Usage: python bench/traces.py [--runs N] [--kinds rebase_pr,...] [--top N] [--timeline]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from app.core.settings import Settings
from app.store.models import Job
from bench.e2e import KINDS, Bench, bench_world
from bench.e2e_floor import Floor
from tests.doubles.otlp_collector import OtlpCollector, Span
from tests.doubles.worker_proc import wait_until

OUTBOX = "outbox wait (delivery span's end → dispatcher's send)"
CELERY = "Celery hand-off (send's end → worker's run)"  # with Celery's own spans
_ID = re.compile(r"/[0-9a-f]{12,64}(?=/|$)")  # container and exec ids
_NUMBER = re.compile(r"/\d+(?=/|$)")
_REPO = re.compile(r"/repos/[^/]+/[^/]+")
_VERSION = re.compile(r"^/v\d+\.\d+")
_NAMED = re.compile(r"/(branches|collaborators)/[^/]+")  # a branch's or a person's name


class NoFloor(Floor):
    """No floor runs: this bench compares parts of one trace with its whole."""

    def rebase(self, branch: str) -> float:
        return 1.0

    def ruff_fix(self, branch: str) -> float:
        return 1.0

    def agent_fix(self, agent: str, n: int) -> float:
        return 1.0

    def review(self, branch: str, number: int) -> float:
        return 1.0


def _path(url: str) -> str:
    """A URL's path with its ids as placeholders: one label for each kind of call."""
    path = re.sub(r"^[a-z+]+://[^/]+", "", url).split("?")[0].removeprefix("/api/v3")
    path = _VERSION.sub("", _NAMED.sub(r"/\1/{name}", _REPO.sub("/repos/{repo}", path)))
    return _NUMBER.sub("/{n}", _ID.sub("/{id}", path))


def label(span: Span) -> str:
    """What a span is counted as: its kind of work, not its instance."""
    a = span.attributes
    if span.name == "sandbox.exec":
        return f"sandbox.exec {a.get('onloop.sandbox.program', '?')}"
    if span.name == "git":
        return f"git {a.get('git.subcommand', '?')}"
    url = str(a.get("http.url") or a.get("url.full") or "")
    if url:
        method = a.get("http.method") or a.get("http.request.method") or span.name
        where = "docker" if url.startswith("http+docker") else "GitHub"
        return f"{where} {method} {_path(url)}"
    system = a.get("db.system") or a.get("db.system.name")
    if system == "redis":
        return f"Redis {span.name}"
    if system:
        return f"SQL {span.name.split()[0]}"
    if span.name.startswith(("run/", "apply_async/")):
        return span.name.split("/")[0] + " (Celery)"
    return span.name


FAMILIES = {
    "GitHub": "GitHub API calls (tokens, comments, check runs, reads)",
    "docker": "Docker API (container create, start, exec set-up, remove)",
    "sandbox.exec": "commands in the sandbox (each docker exec)",
    "git": "git on the host (mirror fetch, push)",
    "SQL": "SQL",
    "Redis": "Redis",
    "job": "onloop's own code (job and step spans' self time)",
    "step": "onloop's own code (job and step spans' self time)",
    "apply_async": "Celery hand-off (send's end → worker's run)",
    "run": "Celery hand-off (send's end → worker's run)",
}


def family(name: str) -> str:
    """The label's kind of cost, for the summary."""
    return FAMILIES.get(name.split()[0].rstrip(":"), name)


def _gaps(start: int, end: int, inner: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end] that no interval of `inner` covers."""
    gaps, at = [], start
    for a, b in sorted(inner):
        if a > at:
            gaps.append((at, min(a, end)))
        at = max(at, b)
    return [*gaps, (at, end)] if at < end else gaps


def _own(s: Span, kids: list[Span], t0: int, t1: int) -> Counter[str]:
    """The span's self time within [t0, t1]; a job's or step's by what came just before
    (its own code between two calls: "job: after git fetch")."""
    start, end = max(s.start, t0), min(s.end, t1)
    times: Counter[str] = Counter()
    if end <= start:
        return times
    inner = [(max(k.start, start), min(k.end, end)) for k in kids]
    for a, b in _gaps(start, end, [(x, y) for x, y in inner if y > x]):
        name = label(s)
        if s.name == "job" or s.name.startswith("step "):
            before = [k for k in kids if k.end <= a]
            last = max(before, key=lambda k: k.end) if before else None
            name += f": after {label(last)}" if last else ": at its start"
        times[name] += b - a
    return times


def self_times(spans: list[Span], t0: int, t1: int) -> Counter[str]:
    """Each label's self time (ns) within [t0, t1], plus the two hand-offs between spans."""
    kids: dict[str, list[Span]] = {}
    for s in spans:
        kids.setdefault(s.parent_id, []).append(s)
    times: Counter[str] = Counter()
    for s in spans:
        times += _own(s, kids.get(s.span_id, []), t0, t1)
    by_name = {s.name.split("/")[0]: s for s in spans if "/onloop.run_job" in s.name}
    delivery = next(s for s in spans if s.name == "webhook.delivery")
    send, run = by_name.get("apply_async"), by_name.get("run")
    if send is not None:
        times[OUTBOX] += max(send.start - delivery.end, 0)
        if run is not None:
            times[CELERY] += max(run.start - send.end, 0)
    return times


def trace_of(collector: OtlpCollector, job_id: int) -> list[Span] | None:
    """The job's whole trace once every span up to the webhook's request has arrived."""
    jobs = [s for s in collector.named("job") if s.attributes.get("onloop.job.id") == job_id]
    if not jobs:
        return None
    with collector.lock:
        spans = [s for s in collector.spans if s.trace_id == jobs[0].trace_id]
    by_id = {s.span_id: s for s in spans}
    at = jobs[0]
    while at.parent_id in by_id:
        at = by_id[at.parent_id]
    return spans if at.parent_id == "" and at.name.startswith("POST /webhooks") else None


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="measured runs per kind, after a warm-up")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which kinds, comma-separated")
    ap.add_argument("--top", type=int, default=10, help="labels printed per kind")
    ap.add_argument("--timeline", action="store_true", help="the last run, span by span")
    args = ap.parse_args()
    collector = OtlpCollector().start()
    # The web app here and the worker process (which inherits this environment) both export.
    os.environ.update(OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100")
    root = Path(tempfile.mkdtemp(prefix="onloop-traces-", dir="/var/tmp"))
    try:
        # The warm pool as `onloop worker` keeps it by default: a trace shows what a job costs
        # in production, not a container's start (ONLOOP_SANDBOX_POOL_SIZE).
        pool = Settings.model_fields["sandbox_pool_size"].default
        with bench_world(root, None, 4, pool) as world:
            bench = Bench(world, NoFloor(world.double, root))
            wait_until(lambda: "ready." in world.worker.output(), 120, "the worker")
            if pool:
                wait_until(lambda: world.containers(), 120, "the warm pool's sandbox")
            for kind in args.kinds.split(","):
                getattr(bench, kind)()  # a warm-up: the mirror, the image
                times: Counter[str] = Counter()
                total = 0
                for _ in range(args.runs):
                    getattr(bench, kind)()
                    with world.db.read() as s:
                        job_id = s.scalar(
                            select(Job.id).where(Job.kind == kind).order_by(Job.id.desc())
                        )
                    assert job_id is not None
                    arrived = partial(trace_of, collector, job_id)
                    wait_until(arrived, 60, f"job {job_id}'s trace")
                    spans = arrived() or []
                    t0 = min(s.start for s in spans)
                    t1 = next(s.end for s in spans if s.name == "job")
                    times += self_times(spans, t0, t1)
                    total += t1 - t0
                report(kind, times, total, args.runs, args.top)
                if args.timeline:
                    timeline(spans)
    finally:
        collector.stop()
    shutil.rmtree(root, ignore_errors=True)


def timeline(spans: list[Span]) -> None:
    """Every span of one trace in the order they started: ms from the first, length in ms,
    indented by depth, with its label (`label`)."""
    by_id = {s.span_id: s for s in spans}

    def depth(s: Span) -> int:
        n = 0
        while s.parent_id in by_id:
            s, n = by_id[s.parent_id], n + 1
        return n

    t0 = min(s.start for s in spans)
    for s in sorted(spans, key=lambda s: s.start):
        at, took = (s.start - t0) / 1e6, (s.end - s.start) / 1e6
        print(f"    {at:8.1f} {took:7.1f}  {'  ' * depth(s)}{label(s)}")


def report(kind: str, times: Counter[str], total: int, runs: int, top: int) -> None:
    print(f"{kind}: webhook's request → job's end, {total / runs / 1e9:.2f} s a run ({runs} run)")
    for name, ns in times.most_common(top):
        print(f"    {ns / total:6.1%}  {name}")
    rest = total - sum(times.values())
    print(f"    {rest / total:6.1%}  (overlap (-) or time outside every span (+))")
    families: Counter[str] = Counter()
    for name, ns in times.items():
        families[family(name)] += ns
    print("  by kind of cost:")
    for name, ns in families.most_common():
        print(f"    {ns / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
