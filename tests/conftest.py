"""Shared fixtures: a real database (SQLite, or PostgreSQL from ONLOOP_TEST_DATABASE_URL),
real Redis, the Flask app, the GitHub double, and the sandboxes (Docker and bubblewrap), a
git server with token auth and the setup egress gateway."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.core.settings import Settings
from app.core.tracing import Tracing
from app.store import migrate
from app.store.db import Database
from app.web import create_app
from tasks.sandbox.base import Limits, Sandbox, SandboxBackend
from tasks.sandbox.docker_backend import DockerBackend
from tasks.sandbox.egress.gateway import EgressGateway
from tasks.sandbox.local_backend import LocalBackend
from tests.doubles.git_server import GitServer
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.sandboxes import (
    IMAGE,
    StartFn,
    docker_or_fail,
    job_containers,
    new_job_id,
    unavailable,
)
from tests.doubles.webhooks import SECRET, TABLES


@pytest.fixture(scope="session")
def _template_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Migrate once per session: a SQLite template file, or a fresh PostgreSQL database."""
    url = os.environ.get("ONLOOP_TEST_DATABASE_URL")
    if url and not url.startswith("sqlite"):
        name = f"onloop_test_{uuid.uuid4().hex[:8]}"
        admin = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        test_url = make_url(url).set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(test_url)
        return test_url
    path = tmp_path_factory.mktemp("db") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    return str(path)


@pytest.fixture
def database_url(_template_db: str, tmp_path: Path) -> str:
    """A migrated, empty database for one test."""
    if _template_db.startswith("postgresql"):
        engine = create_engine(_template_db)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
        engine.dispose()
        return _template_db
    path = tmp_path / "onloop.db"
    shutil.copy(_template_db, path)
    return f"sqlite:///{path}"


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database_url,
        webhook_secret=SECRET,  # type: ignore[arg-type]
        app_slug="onloop",
        redis_url=os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9"),
    )


@pytest.fixture
def client(settings: Settings, db: Database) -> Any:
    app = create_app(settings, db=db)
    redis = app.extensions["onloop"].metrics.writer.client
    if redis is not None:  # metrics live in the shared test Redis: start each test from zero
        keys = list(redis.scan_iter("onloop:metrics:*"))
        if keys:
            redis.delete(*keys)
    return app.test_client()


@pytest.fixture(scope="session")
def github_double_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHubDouble]:
    """The one running double of the session; tests want `github_double` instead."""
    double = GitHubDouble(tmp_path_factory.mktemp("github-double"))
    yield double
    double.close()


# The one module whose tests merge and approve on purpose: they check that the double refuses.
REFUSAL_TESTS = "tests.integration.test_github_double"


@pytest.fixture
def github_double(
    github_double_server: GitHubDouble, request: pytest.FixtureRequest
) -> Iterator[GitHubDouble]:
    """The double with a clean world; fails the test if the double itself hit a bug, or if
    anything asked it to merge or approve (onloop never does, across the whole suite)."""
    github_double_server.reset()
    yield github_double_server
    errors = list(github_double_server.errors)
    if errors:
        pytest.fail("GitHub double raised:\n" + "\n".join(errors), pytrace=False)
    refused = [f"{r.kind} {r.repo}#{r.number}" for r in github_double_server.refusals]
    if refused and request.module.__name__ != REFUSAL_TESTS:
        pytest.fail("onloop must never merge or approve, yet: " + ", ".join(refused), pytrace=False)


@pytest.fixture
def github_settings(github_double: GitHubDouble, tmp_path: Path) -> Settings:
    """Settings for onloop pointed at the double (see settings_for)."""
    return settings_for(github_double, tmp_path)


# --- sandboxes ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_client() -> Any:
    return docker_or_fail()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"sandbox image {IMAGE} missing: run `bash .ci/sandbox-setup.sh`")
    return IMAGE


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(backend_name: str, request: pytest.FixtureRequest) -> SandboxBackend:
    if backend_name == "docker":
        return DockerBackend(request.getfixturevalue("docker_client"))
    if not shutil.which("bwrap"):
        unavailable("bubblewrap is not installed (apt-get install bubblewrap)")
    return LocalBackend()


@pytest.fixture
def run_image(backend_name: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("image")) if backend_name == "docker" else ""


@pytest.fixture
def start(
    backend: SandboxBackend, run_image: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StartFn]:
    """start(limits=..., files=...) -> a sandbox on a fresh workspace; all stopped after,
    and (Docker) the test fails if any of their containers is still there."""
    started: list[Sandbox] = []

    def _start(limits: Limits | None = None, files: dict[str, str] | None = None) -> Sandbox:
        workspace = tmp_path / f"ws-{len(started)}"
        workspace.mkdir()
        for name, content in (files or {}).items():
            (workspace / name).write_text(content)
        sandbox = backend.start(
            new_job_id(), run_image, workspace, limits or Limits(command_timeout=60)
        )
        started.append(sandbox)
        return sandbox

    yield _start
    for sandbox in started:
        sandbox.stop()
    if backend.name == "docker":
        client = request.getfixturevalue("docker_client")
        left = [c.name for s in started for c in job_containers(client, s.job_id)]
        assert not left, f"containers left behind: {left}"


@pytest.fixture
def token() -> str:
    return "ghs_" + uuid.uuid4().hex + uuid.uuid4().hex[:4]


@pytest.fixture
def git_server(tmp_path: Path, token: str) -> Iterator[GitServer]:
    root = tmp_path / "served"
    root.mkdir()
    with GitServer(root, token) as server:
        yield server


@pytest.fixture(scope="session")
def proxy_image(docker_client: Any, image: str) -> str:
    try:
        docker_client.containers.run(image, ["test", "-x", "/opt/tools/bin/proxy"], remove=True)
    except Exception:
        unavailable(f"{image} has no proxy.py: run `onloop sandbox build-image`")
    return image


@pytest.fixture
def gateway(docker_client: Any, proxy_image: str, tmp_path: Path) -> EgressGateway:
    return EgressGateway(
        docker_client, tmp_path / "egress", proxy_image=proxy_image, cache_dir=tmp_path / "dl"
    )


@pytest.fixture
def host_ip(docker_client: Any, gateway: EgressGateway) -> str:
    """This machine's own address on the proxies' network: where the test index listens."""
    network = docker_client.networks.get(gateway.egress_network())
    return str(network.attrs["IPAM"]["Config"][0]["Gateway"])


# --- traces ----------------------------------------------------------------------------


class SpanGate(SimpleSpanProcessor):
    """Hands ended spans to the exporter only while a test holds the `tracing` fixture: the
    session's provider stays OpenTelemetry's global one (set once per process), whose
    tracers the git, sandbox and step code use; other tests' spans are dropped, not kept."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.exporter, self.open = exporter, False

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            super().on_end(span)


@pytest.fixture(scope="session")
def span_gate() -> SpanGate:
    """One provider for the session, recording into memory, unbatched, behind a gate."""
    gate = SpanGate(InMemorySpanExporter())
    Tracing.with_processor("onloop-test", gate)
    return gate


@pytest.fixture
def span_exporter(span_gate: SpanGate) -> InMemorySpanExporter:
    return span_gate.exporter


@pytest.fixture
def tracing(span_gate: SpanGate, span_exporter: InMemorySpanExporter) -> Iterator[Tracing]:
    """Traces on, for the app and the worker a test builds; instrumentation undone after."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    span_gate.open = True
    span_exporter.clear()
    traces = Tracing("onloop-test", provider)
    try:
        yield traces
    finally:
        traces.shutdown()
        span_gate.open = False
        span_exporter.clear()
