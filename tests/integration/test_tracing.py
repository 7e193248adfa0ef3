"""Traces read back with the SDK's in-memory span_exporter: one trace holds a signed delivery and
the whole job it caused (steps, sandbox commands, git, GitHub calls), and no span carries a
token, a URL's credentials, a command's arguments or a header."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from celery import current_app
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text

from app.core.crypto import TokenBox
from app.core.queues import QUEUE, RUN_JOB
from app.core.tracing import Tracing, context_of, nanos, traceparent_of
from app.github.user_tokens import TokenPair, store
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState
from app.web import create_app
from tasks.queue.dispatch import publish_pending
from tasks.worker import Worker
from tests.conftest import SpanGate
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import wait_until

REPO = "octo/widgets"
ROOT = Path(__file__).resolve().parents[2]


def authorize(db: Database, double: GitHubDouble, login: str) -> str:
    token = double.issue_user_token(login)
    user = double.user(login)
    store(db, TokenBox(SECRET_KEY), user.id, user.login, TokenPair(token, None, None, None))
    return token


def values(span: ReadableSpan) -> list[str]:
    """Every attribute value of the span and of its events, as text."""
    found = [str(v) for v in (span.attributes or {}).values()]
    for event in span.events:
        found += [str(v) for v in (event.attributes or {}).values()]
    return [*found, span.name, str(span.status.description or "")]


@pytest.mark.skipif(not shutil.which("bwrap"), reason="the local sandbox needs bubblewrap")
def test_one_trace_holds_the_delivery_and_the_whole_job(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    tracing: Tracing,
    span_exporter: InMemorySpanExporter,
) -> None:
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        sandbox_backend="local",
    )
    double = github_double
    double.create_repo(REPO, files={"README.md": "widgets\n", "lib.py": "A = 1\n"})
    double.create_branch(REPO, "feature")
    double.commit(REPO, "feature", {"feature.py": "print('feature')\n"}, message="Add feature")
    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    double.create_pull(REPO, "feature", title="Feature", user="alice")
    double.set_permission(REPO, "alice", "write")
    db = Database(database_url)
    worker = Worker(settings, db=db, tracing=tracing)
    try:
        user_token = authorize(db, double, "alice")
        client = create_app(settings, db=db, tracing=tracing).test_client()
        response = deliver(
            client, "issue_comment", pr_comment(double, REPO, 1, "/agent rebase", "alice")
        )
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        with db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None and job.traceparent is not None
            stored = job.traceparent
        assert worker.jobs.run(job_id) == JobState.SUCCEEDED
    finally:
        worker.close()
        redis.stop()

    spans = span_exporter.get_finished_spans()
    (delivery,) = [s for s in spans if s.name == "webhook.delivery"]
    assert delivery.context is not None and delivery.attributes is not None
    assert delivery.attributes["onloop.github.event"] == "issue_comment"
    assert delivery.attributes["onloop.job_ids"] == (job_id,)
    trace_id = delivery.context.trace_id
    # The row keeps the delivery span's own context: the worker's job span is its child.
    assert stored.startswith(f"00-{trace_id:032x}-{delivery.context.span_id:016x}-")
    (request,) = [s for s in spans if s.name == "POST /webhooks/github"]  # Flask's
    assert delivery.parent is not None and delivery.parent.span_id == request.context.span_id
    (job,) = [s for s in spans if s.name == "job"]
    assert job.context.trace_id == trace_id
    assert job.parent is not None and job.parent.span_id == delivery.context.span_id
    assert job.attributes is not None and job.attributes["onloop.job.kind"] == "rebase_pr"

    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in in_trace}
    steps = {s.name for s in in_trace if s.name.startswith("step ")}
    assert {"step policy", "step authorization"} <= steps, names
    assert any(s.name == "sandbox.exec" for s in in_trace), names
    subcommands = {s.attributes.get("git.subcommand") for s in in_trace if s.name == "git"}
    assert {"fetch", "push"} <= subcommands, subcommands
    github_calls = [s for s in in_trace if s.attributes and "/api/v3/" in str(s.attributes)]
    assert github_calls, names  # requests' spans of PyGithub's calls
    assert any(s.name.startswith(("SELECT", "UPDATE", "INSERT")) for s in in_trace), names

    # Every span of the job hangs under the delivery: one tree, nothing orphaned.
    by_id = {s.context.span_id: s for s in in_trace}
    for s in in_trace:
        top = s
        while top.parent is not None and top.parent.span_id in by_id:
            top = by_id[top.parent.span_id]
        assert top.name == "POST /webhooks/github", (s.name, top.name)

    for s in in_trace:
        if s.name == "sandbox.exec":
            assert set(s.attributes or {}) == {
                "onloop.sandbox.program",
                "onloop.job.id",
                "onloop.sandbox.exit_code",
                "onloop.sandbox.timed_out",
            }
    secrets = [user_token, *double.tokens, "x-access-token", "Authorization", "Bearer"]
    leaked = [(s.name, v) for s in spans for v in values(s) for x in secrets if x in v]
    assert not leaked


def test_traceparent_round_trip(tracing: Tracing) -> None:
    tracer = tracing.tracer("test")
    assert tracer is not None
    with tracer.start_as_current_span("outer") as outer:
        parent = traceparent_of(outer)
    assert parent is not None
    found = context_of(parent)
    assert found is not None
    assert context_of(None) is None and context_of("garbage") is None
    assert context_of("00-" + "0" * 32 + "-" + "0" * 16 + "-01") is None  # invalid ids


def test_a_job_without_a_stored_traceparent_is_a_trace_of_its_own(
    github_double: GitHubDouble,
    database_url: str,
    db: Database,
    tmp_path: Path,
    tracing: Tracing,
    span_exporter: InMemorySpanExporter,
) -> None:
    """A job recorded while traces were off (no traceparent) still gets its spans, as a
    trace of its own, with its steps in it."""
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    double.install(REPO)
    double.create_issue(REPO, "A thread")
    double.set_permission(REPO, "octocat", "write")  # who comments: may have answers
    settings = settings_for(double, tmp_path, database_url=database_url)
    client = create_app(settings, db=db).test_client()  # traces off: nothing stored
    response = deliver(client, "issue_comment", pr_comment(double, REPO, 1, "/agent dance"))
    (job_id,) = response.get_json()["jobs"]
    with db.read() as s:
        row = s.get(Job, job_id)
        assert row is not None and row.traceparent is None
    assert not [s for s in span_exporter.get_finished_spans() if s.name == "webhook.delivery"]
    worker = Worker(settings, db=db, tracing=tracing, listeners=lambda ctx: [])
    assert worker.jobs.run(job_id) == JobState.SUCCEEDED
    (job,) = [s for s in span_exporter.get_finished_spans() if s.name == "job"]
    assert job.parent is None
    kids: list[Any] = [s for s in span_exporter.get_finished_spans() if s.parent is not None]
    assert any(s.parent.span_id == job.context.span_id for s in kids)

    # Each step's span lasts exactly as its record (what the job page draws) says.
    with db.read() as s:
        row = s.get(Job, job_id)
        stored = list(row.steps or []) if row else []
    spans = {s.name: s for s in span_exporter.get_finished_spans() if s.name.startswith("step ")}
    assert stored and len(spans) == len(stored), (stored, list(spans))
    for step in stored:
        traced = spans[f"step {step['name']}"]
        assert traced.start_time == nanos(step["started"])
        assert traced.end_time == nanos(step["started"]) + nanos(step["duration"])


def test_the_context_rides_the_outbox_row_and_the_celery_message(
    github_double: GitHubDouble,
    database_url: str,
    db: Database,
    tmp_path: Path,
    tracing: Tracing,
    span_exporter: InMemorySpanExporter,
) -> None:
    """Dispatcher → Redis → a Celery worker (in this process, so its spans are readable):
    the message carries the job id alone, its headers the delivery's trace, and the job's
    span is a child of Celery's span of the message, in the delivery's trace."""
    from celery.contrib.testing.worker import start_worker

    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    double.install(REPO)
    double.create_issue(REPO, "A thread")
    double.set_permission(REPO, "octocat", "write")
    redis_server = RedisServer(tmp_path).start()
    try:
        settings = settings_for(
            double, tmp_path, database_url=database_url, redis_url=redis_server.url
        )
        worker = Worker(settings, db=db, tracing=tracing, listeners=lambda ctx: [])
        celery = worker.celery()
        client = create_app(settings, db=db, tracing=tracing).test_client()
        response = deliver(client, "issue_comment", pr_comment(double, REPO, 1, "/agent dance"))
        (job_id,) = response.get_json()["jobs"]
        assert publish_pending(db, celery, traced=True) == 1

        (raw,) = redis.Redis.from_url(redis_server.url).lrange(QUEUE, 0, -1)
        message = json.loads(raw)
        assert json.loads(base64.b64decode(message["body"]))[0] == [job_id]  # the id alone
        (delivery,) = [
            s for s in span_exporter.get_finished_spans() if s.name == "webhook.delivery"
        ]
        trace_id = f"{delivery.context.trace_id:032x}"
        assert message["headers"]["traceparent"].split("-")[1] == trace_id

        with start_worker(celery, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            wait_until(lambda: state_of(db, job_id) in TERMINAL_STATES, 60, "the help job")
    finally:
        redis_server.stop()
    assert state_of(db, job_id) == JobState.SUCCEEDED, result_of(db, job_id)

    spans = span_exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (job,) = [s for s in spans if s.name == "job"]
    assert f"{job.context.trace_id:032x}" == trace_id
    assert job.parent is not None
    run = by_id[job.parent.span_id]  # Celery's span of the task it ran
    assert run.name.startswith("run/") and run.parent is not None
    publish = by_id[run.parent.span_id]  # the dispatcher's send, in the delivery's trace
    assert publish.name.startswith("apply_async/")
    assert publish.parent is not None and publish.parent.span_id == delivery.context.span_id


def state_of(db: Database, job_id: int) -> str | None:
    with db.read() as s:
        row = s.get(Job, job_id)
        return row.state if row else None


def result_of(db: Database, job_id: int) -> object:
    with db.read() as s:
        row = s.get(Job, job_id)
        return row and (row.result, row.steps)


def test_shutdown_leaves_nothing_instrumented(
    database_url: str, db: Database, tmp_path: Path, span_gate: SpanGate
) -> None:
    """What a worker's and a web app's traces patch process-wide is put back at shutdown,
    so the tests after these run as without traces: requests, Redis and Celery unwrapped,
    the database's statements untraced and the test's Celery app no longer the default."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    traces = Tracing("onloop-test", provider)
    settings = settings_for(
        GitHubDouble(tmp_path / "double"),
        tmp_path,
        database_url=database_url,
        redis_url=os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9"),
    )
    worker = Worker(settings, db=db, tracing=traces)
    celery = worker.celery()
    create_app(settings, db=db, tracing=traces)
    assert hasattr(requests.Session.send, "__wrapped__")
    assert current_app._get_current_object() is celery
    span_gate.open = True
    try:
        with db.read() as s:
            s.execute(text("SELECT 1"))
        assert [x for x in span_gate.exporter.get_finished_spans() if x.name.startswith("SELECT")]
        traces.shutdown()
        span_gate.exporter.clear()
        with db.read() as s:
            s.execute(text("SELECT 1"))
        assert not span_gate.exporter.get_finished_spans()
    finally:
        traces.shutdown()
        span_gate.open = False
        span_gate.exporter.clear()
        worker.close()
    assert not hasattr(requests.Session.send, "__wrapped__")
    for instrumentor in (CeleryInstrumentor(), RedisInstrumentor(), RequestsInstrumentor()):
        assert not instrumentor.is_instrumented_by_opentelemetry
    assert current_app._get_current_object() is not celery
    assert RUN_JOB not in current_app.tasks


def test_with_the_otel_variables_unset_nothing_is_set_up(tmp_path: Path) -> None:
    """A web app and a worker built with no OTEL_* variable: no provider, nothing wrapped,
    and the SDK's traces, the exporters and the instrumentations not even imported (a
    process of its own, since this one's provider is set for the tests above). redis-py
    imports the SDK's metrics by itself when the SDK is installed, so those are not counted."""
    script = f"""
import sys, requests, celery
from opentelemetry import trace
from app.core.settings import Settings
from app.web import create_app
from tasks.queue.dispatch import publish_pending
from tasks.worker import Worker
settings = Settings(_env_file=None, database_url="sqlite:///{tmp_path}/off.db",
                    sandbox_backend="local")
from app.store import migrate
migrate.upgrade(settings.database_url)
app = create_app(settings)
worker = Worker(settings)
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace",
                "opentelemetry.instrumentation", "opentelemetry.span_exporter")))
print("provider", type(trace.get_tracer_provider()).__name__)
print("loaded", loaded)
intake = app.wsgi_app  # POST /webhooks/github's own WSGI app, Flask's behind it
print("wrapped", hasattr(requests.Session.send, "__wrapped__"),
      type(intake.rest).__name__ != "method" or intake.handler != intake.serve)
print("tracers", app.extensions["onloop"].tracer, worker.jobs.tracer)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "provider ProxyTracerProvider" in lines, done.stdout
    assert "loaded []" in lines, done.stdout
    assert "wrapped False False" in lines, done.stdout
    assert "tracers None None" in lines, done.stdout
