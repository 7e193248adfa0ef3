"""Traces across processes: the web (here, its spans in memory) records a delivery, and a
real `onloop worker` process, switched on by OTEL_EXPORTER_OTLP_ENDPOINT alone, exports its
job's spans over OTLP/HTTP to a collector double, in the delivery's trace."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.core.tracing import Tracing
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.otlp_collector import OtlpCollector
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until

REPO = "octo/hello"


def state_of(db: Database, job_id: int) -> str | None:
    with db.read() as s:
        job = s.get(Job, job_id)
        return job.state if job else None


def exported(collector: OtlpCollector, root: str) -> bool:
    """The job's span and each of its parents up to `root` (the web's delivery span, not
    exported here): Celery's span of the message ends after the job's, and the batches of
    one process may arrive in any order."""
    jobs = collector.named("job")
    by_id = {s.span_id: s for s in collector.spans}
    at = jobs[0].parent_id if jobs else None
    while at in by_id:
        at = by_id[at].parent_id
    return at == root


def test_a_worker_process_exports_the_job_in_the_deliverys_trace(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    tracing: Tracing,
    span_exporter: InMemorySpanExporter,
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hello\n"})
    double.create_issue(REPO, "A thread")
    double.set_permission(REPO, "octocat", "write")
    redis = RedisServer(tmp_path).start()
    collector = OtlpCollector().start()
    db = Database(database_url)
    settings = settings_for(
        double, tmp_path, database_url=database_url, redis_url=redis.url, github_pacing=False
    )
    worker = WorkerProcess(
        settings,
        tmp_path / "worker.log",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="100",  # milliseconds between exports
    )
    try:
        client = create_app(settings, db=db, tracing=tracing).test_client()
        worker.start()
        response = deliver(client, "issue_comment", pr_comment(double, REPO, 1, "/agent dance"))
        assert response.status_code == 202
        (job_id,) = response.get_json()["jobs"]
        wait_until(lambda: state_of(db, job_id) in TERMINAL_STATES, 60, "the help job")
        (delivery,) = [
            s for s in span_exporter.get_finished_spans() if s.name == "webhook.delivery"
        ]
        root = f"{delivery.context.span_id:016x}"
        wait_until(lambda: exported(collector, root), 30, "the job's spans at the collector")
    finally:
        worker.stop()
        collector.stop()
        db.dispose()
        redis.stop()
    assert state_of(db, job_id) == JobState.SUCCEEDED, worker.output()

    trace_id = f"{delivery.context.trace_id:032x}"
    (job,) = collector.named("job")
    assert job.trace_id == trace_id and job.service == "onloop-worker"
    assert job.attributes["onloop.job.id"] == job_id
    in_trace = {s.span_id: s for s in collector.spans if s.trace_id == trace_id}
    run = in_trace[job.parent_id]  # Celery's span of the message, under the dispatcher's send
    assert run.name == "run/onloop.run_job"
    assert in_trace[run.parent_id].name == "apply_async/onloop.run_job"
    assert in_trace[run.parent_id].parent_id == f"{delivery.context.span_id:016x}"
    posts = [s for s in in_trace.values() if s.attributes.get("http.method") == "POST"]
    assert any("/issues/1/comments" in str(s.attributes.get("http.url")) for s in posts)
