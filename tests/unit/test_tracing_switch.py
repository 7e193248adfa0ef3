"""Which OTEL_* variables switch traces on, and what a git span may name."""

from __future__ import annotations

import pytest

from app.core.tracing import Exporter, Tracing, TracingConfigError, choose_exporter
from tasks.git.process import subcommand


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, Exporter.NONE),
        ({"OTEL_SERVICE_NAME": "onloop"}, Exporter.NONE),  # naming alone turns nothing on
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, Exporter.OTLP),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, Exporter.OTLP),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, Exporter.NONE),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, Exporter.OTLP),
        ({"OTEL_TRACES_EXPORTER": "console"}, Exporter.CONSOLE),
        (
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"},
            Exporter.NONE,
        ),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, Exporter.NONE),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, Exporter.OTLP),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            Exporter.OTLP,
        ),
    ],
)
def test_what_switches_traces_on(environ: dict[str, str], expected: Exporter) -> None:
    assert choose_exporter(environ) is expected


@pytest.mark.parametrize(
    ("environ", "names"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
        ),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST": ".*",
            },
            "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST",
        ),
    ],
)
def test_what_onloop_refuses_is_named(environ: dict[str, str], names: str) -> None:
    with pytest.raises(TracingConfigError, match=names):
        choose_exporter(environ)


def test_off_is_nothing() -> None:
    tracing = Tracing.from_env("onloop-web", {})
    assert not tracing.enabled and tracing.provider is None
    assert tracing.tracer("x") is None
    tracing.shutdown()  # nothing to undo


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["fetch", "https://github.com/o/r.git", "main"], "fetch"),
        (["-c", "http.extraHeader=X", "push", "--force-with-lease", "origin"], "push"),
        (["-C", "/some/path", "rev-parse", "HEAD"], "rev-parse"),
        (["--git-dir", "/m.git", "--bare", "gc"], "gc"),
        (["--version"], ""),
    ],
)
def test_a_git_span_names_the_subcommand_alone(args: list[str], expected: str) -> None:
    assert subcommand(args) == expected
