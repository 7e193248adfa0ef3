"""An OTLP/HTTP trace collector on 127.0.0.1: it takes what another process exports to
`/v1/traces` (protobuf, https://opentelemetry.io/docs/specs/otlp/#otlphttp) and keeps the spans."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.doubles.http_handler import NoDelayHandler


@dataclass
class Span:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str  # "" for a root
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)  # the linked spans' trace ids
    start: int = 0  # nanoseconds since the epoch
    end: int = 0


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class OtlpCollector:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(NoDelayHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                collector.take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource in request.resource_spans:
            attributes = {a.key: _value(a.value) for a in resource.resource.attributes}
            service = str(attributes.get("service.name", ""))
            for scope in resource.scope_spans:
                for s in scope.spans:
                    found.append(
                        Span(
                            s.name,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            service,
                            {a.key: _value(a.value) for a in s.attributes},
                            [link.trace_id.hex() for link in s.links],
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def start(self) -> OtlpCollector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
