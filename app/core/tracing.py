"""OpenTelemetry traces: off unless the standard OTEL_* variables ask for them, set up once.

Each process's composition root (`app.web.create_app`, `tasks.worker.Worker`) builds one
`Tracing` and hands it down. Off, nothing is imported from the SDK, no provider is made and
nothing is instrumented: OpenTelemetry's API answers every span with its no-op. On, the one
thing shared through a global is what OpenTelemetry itself keeps there: its tracer provider
(`opentelemetry.trace.set_tracer_provider`), so the spans made deep down (`tasks.git.process`,
`tasks.sandbox.base`, `tasks.runner.context`) with `trace.get_tracer(...)` reach it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication
    from celery import Celery
    from flask import Flask
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from sqlalchemy.engine import Engine

# Either of these, set and not empty, switches traces on (exported over OTLP/HTTP).
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
# Header capture would put tokens (Authorization) and webhook signatures on spans.
HEADER_CAPTURE_PREFIX = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_"
# Requests whose URL carries a one-time code that buys a token or the App's key, and the
# job page's event stream (a response that lasts as long as someone watches).
WEB_EXCLUDED_URLS = "/oauth/,/setup,/jobs/[0-9]+/events"
_PROPAGATOR = TraceContextTextMapPropagator()
WsgiWrapper = Callable[["WSGIApplication"], "WSGIApplication"]


class TracingConfigError(ValueError):
    """The OTEL_* variables ask for something onloop does not do; the message says what."""


class Exporter(StrEnum):
    """Where spans go: `OTEL_TRACES_EXPORTER`'s values that onloop supports."""

    OTLP = "otlp"  # OTLP over HTTP with protobuf (opentelemetry-exporter-otlp-proto-http)
    CONSOLE = "console"  # one JSON document per span on standard output, for a quick look
    NONE = "none"


def choose_exporter(environ: Mapping[str, str]) -> Exporter:
    """Which exporter the environment asks for; NONE (traces off) unless it asks at all.

    Unlike OpenTelemetry's own default (`otlp` to localhost), onloop traces nothing until
    `OTEL_TRACES_EXPORTER` names an exporter or an OTLP endpoint is set;
    `OTEL_SDK_DISABLED=true` wins over both."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return Exporter.NONE
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        try:
            exporter = Exporter(named)
        except ValueError:
            supported = ", ".join(e.value for e in Exporter)
            raise TracingConfigError(
                f"OTEL_TRACES_EXPORTER={named}: onloop supports one of {supported}"
            ) from None
    elif any(environ.get(name, "").strip() for name in ENDPOINT_VARS):
        exporter = Exporter.OTLP
    else:
        return Exporter.NONE
    if exporter is Exporter.NONE:
        return exporter
    for name in PROTOCOL_VARS:
        protocol = environ.get(name, "").strip()
        if protocol and protocol != "http/protobuf" and exporter is Exporter.OTLP:
            raise TracingConfigError(f"{name}={protocol}: onloop exports OTLP as http/protobuf")
    captured = sorted(
        k
        for k in environ
        if k.startswith(HEADER_CAPTURE_PREFIX) and not k.endswith("SANITIZE_FIELDS")
    )
    if captured:
        raise TracingConfigError(
            f"{captured[0]} is set: onloop never puts HTTP headers on spans (they carry tokens)"
        )
    return exporter


def traceparent_of(span: trace.Span) -> str | None:
    """The span's W3C `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def context_of(traceparent: str | None) -> otel_context.Context | None:
    """The remote span context a stored `traceparent` names; None for none or a bad one."""
    if not traceparent:
        return None
    found = _PROPAGATOR.extract({"traceparent": traceparent})
    return found if trace.get_current_span(found).get_span_context().is_valid else None


@contextmanager
def within(traceparent: str | None) -> Iterator[None]:
    """Run the block as a child of a stored `traceparent` (as is, when there is none)."""
    parent = context_of(traceparent)
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def span(
    tracer: trace.Tracer,
    name: str,
    attributes: Mapping[str, AttributeValue],
    *,
    context: otel_context.Context | None = None,
    links: Sequence[trace.Link] = (),
    start_time: int | None = None,
    end_on_exit: bool = True,
) -> Iterator[trace.Span]:
    """A span as the current one (a child of `context`'s when given); an exception marks it
    failed with the exception's type alone: its message may quote a URL, a command or a
    reply that a span must not keep. `start_time` (ns since the epoch) and
    `end_on_exit=False` let a caller give it the times it records itself (a job's steps)."""
    with tracer.start_as_current_span(
        name,
        context=context,
        attributes=attributes,
        links=links,
        start_time=start_time,
        record_exception=False,
        set_status_on_exception=False,
        end_on_exit=end_on_exit,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def nanos(seconds: float) -> int:
    """Seconds since the epoch, as a span's times are kept: nanoseconds."""
    return round(seconds * 1e9)


@dataclass
class Tracing:
    """One process's traces: `provider` is None when they are off."""

    service: str
    provider: TracerProvider | None = None
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _engines: set[int] = field(default_factory=set, repr=False)  # id() of those traced

    @classmethod
    def from_env(cls, service: str, environ: Mapping[str, str] | None = None) -> Tracing:
        """Traces as the OTEL_* variables say (`choose_exporter`), for `service` unless
        `OTEL_SERVICE_NAME` names it. Off, the SDK is not even imported."""
        env = os.environ if environ is None else environ
        exporter = choose_exporter(env)
        if exporter is Exporter.NONE:
            return cls(service)
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider

        current = trace.get_tracer_provider()
        if isinstance(current, SdkProvider):  # another root in this process (onloop dev)
            return cls(service, current)
        return cls.with_exporter(service, _exporter(exporter), batch=True, environ=env)

    @classmethod
    def with_exporter(
        cls,
        service: str,
        exporter: SpanExporter,
        *,
        batch: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> Tracing:
        """Traces on, sent to `exporter` (tests: InMemorySpanExporter, unbatched), made
        OpenTelemetry's global provider unless this process already has one."""
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        return cls.with_processor(service, processor, environ=environ)

    @classmethod
    def with_processor(
        cls, service: str, processor: SpanProcessor, *, environ: Mapping[str, str] | None = None
    ) -> Tracing:
        """Traces on, each ended span handed to `processor`; as `with_exporter`."""
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider

        env = os.environ if environ is None else environ
        named = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
        provider = SdkProvider(resource=Resource.create(named))  # sampler: OTEL_TRACES_SAMPLER
        provider.add_span_processor(processor)
        if not isinstance(trace.get_tracer_provider(), SdkProvider):
            trace.set_tracer_provider(provider)
        return cls(service, provider)

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def tracer(self, name: str) -> trace.Tracer | None:
        """A tracer of this process's provider; None when traces are off."""
        return None if self.provider is None else self.provider.get_tracer(name)

    def instrument_web(self, app: Flask, engine: Engine) -> None:
        """Spans for the app's requests (not those whose URL carries a code) and its SQL."""
        if self.provider is None:
            return
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor.instrument_app(
            app, tracer_provider=self.provider, excluded_urls=WEB_EXCLUDED_URLS
        )
        self._undo.append(lambda: FlaskInstrumentor.uninstrument_app(app))
        self.instrument_engine(engine)

    def wsgi_middleware(self) -> WsgiWrapper | None:
        """What wraps a WSGI app outside Flask's (app.web.webhooks.Intake) in server spans
        named as Flask's are (`POST /webhooks/github`); None while traces are off."""
        if self.provider is None:
            return None
        from opentelemetry.instrumentation.wsgi import OpenTelemetryMiddleware

        provider = self.provider
        return lambda app: OpenTelemetryMiddleware(app, tracer_provider=provider)

    def instrument_worker(self, engine: Engine) -> None:
        """Spans for Celery's publish and run (with the context in the message's headers),
        Redis commands (arguments as `?`), HTTP calls through requests (PyGithub's GitHub
        calls; URLs only, never headers) and SQL."""
        if self.provider is None:
            return
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.redis import RedisInstrumentor
        from opentelemetry.instrumentation.requests import RequestsInstrumentor

        for instrumentor in (CeleryInstrumentor(), RedisInstrumentor(), RequestsInstrumentor()):
            if not instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.instrument(tracer_provider=self.provider)
                self._undo.append(instrumentor.uninstrument)
        self.instrument_engine(engine)

    def instrument_celery(self, celery: Celery) -> None:
        """Make `celery` the process's default app and this thread's current one until
        `shutdown`. Celery's instrumentation looks up the task of a message being sent in
        the current app (celery.registry), which for a thread of its own, such as the
        dispatcher, is the default app; were the task not there, the send's span would never
        end and would stay that thread's context. `worker_main` sets the default app too,
        but only after the dispatcher has started."""
        if self.provider is None:
            return
        from celery import Celery as CeleryApp

        celery.set_default()
        celery.set_current()

        def blank() -> None:  # what Celery itself makes when no app is set
            empty = CeleryApp("default", set_as_current=False)
            empty.set_default()
            empty.set_current()

        self._undo.append(blank)

    def instrument_engine(self, engine: Engine) -> None:
        """Spans for the SQL on `engine` (statements with placeholders, never parameters)."""
        if self.provider is None or id(engine) in self._engines:
            return
        from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
        from opentelemetry.metrics import NoOpMeter

        # The engine's own listeners, not SQLAlchemyInstrumentor().instrument(): that also
        # wraps create_async_engine, whose import needs greenlet, which onloop does without.
        usage = NoOpMeter("onloop").create_up_down_counter("db.client.connections.usage")
        EngineTracer(self.provider.get_tracer("onloop.sql"), engine, usage)
        self._engines.add(id(engine))
        self._undo.append(EngineTracer.remove_all_event_listeners)

    def shutdown(self) -> None:
        """Undo the instrumentation and send what is still buffered."""
        while self._undo:
            self._undo.pop()()
        if self.provider is not None:
            self.provider.force_flush()


def _exporter(kind: Exporter) -> SpanExporter:
    """The SpanExporter for `kind`; the OTLP one reads its endpoint, headers, timeout and
    certificate from the OTEL_EXPORTER_OTLP_* variables itself."""
    if kind is Exporter.CONSOLE:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
