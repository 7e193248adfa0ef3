"""POST /webhooks/github: verify the raw body, record the delivery, answer fast.

A WSGI app of its own in front of Flask's (`Intake`): the hot path skips Flask's request
context, routing and hooks (15-25 % of a web worker's CPU a delivery on PostgreSQL,
bench/intake.py). Every other path goes on to Flask.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING

import sqlalchemy.exc
import structlog
from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length, get_input_stream

from app.core.tracing import traceparent_of
from app.intake.events import OUTCOME_HEADER, BadRequest, Event
from app.intake.record import IntakeResult, record
from app.store.db import Database
from app.web.state import Onloop

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from app.core.tracing import WsgiWrapper

PATH = "/webhooks/github"

# Seconds a sender should wait while the database is away. GitHub does not retry a failed
# delivery by itself; `onloop redeliver` and beat's sweep ask for it again
# (https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries).
RETRY_AFTER = 30


def _unavailable(db: Database) -> tuple[type[BaseException], ...]:
    """The errors that mean the database cannot be reached now (PEP 249's OperationalError
    and InterfaceError, raw or wrapped by SQLAlchemy), not that the request was wrong."""
    dbapi = db.engine.dialect.loaded_dbapi
    wrapped = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
    return (*wrapped, sqlalchemy.exc.TimeoutError, dbapi.OperationalError, dbapi.InterfaceError)


def _record(state: Onloop, event: Event, traceparent: str | None) -> IntakeResult | None:
    """`record`, or None when the database is unreachable (logged once per outage)."""
    try:
        result = record(
            state.db,
            event,
            state.settings.fix_label,
            state.settings.app_id,
            state.kinds,
            state.settings.max_event_age,
            traceparent,
        )
    except _unavailable(state.db) as exc:
        state.db_outage.failed(exc, state.log)
        return None
    state.db_outage.recovered(state.log)
    if len(result.job_ids) > len(result.joined):  # committed new jobs: wake the dispatcher
        state.bell.ring()
    return result


@dataclass
class Response:
    """An answer: its status, its JSON body (none for 204) and any more headers."""

    status_code: int
    body: dict[str, object] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __call__(self, start_response: StartResponse) -> Iterable[bytes]:
        status = f"{self.status_code} {HTTPStatus(self.status_code).phrase}"
        headers = list(self.headers.items())
        if self.status_code == 204:  # no body, so no type and no length
            start_response(status, headers)
            return []
        data = json.dumps(self.body, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        start_response(status, headers)
        return [data]


def _answer(status: int, **body: object) -> Response:
    if status == 204:
        return Response(204, headers={OUTCOME_HEADER: str(body.get("outcome", ""))})
    return Response(status, body)


def _count_closed_pull(state: Onloop, event: Event) -> None:
    """onloop's own pull requests (branches `onloop/...`) merged or closed: the merge rate."""
    pull = event.payload.get("pull_request", {})
    if pull.get("head", {}).get("ref", "").startswith("onloop/"):
        outcome = "merged" if pull.get("merged") else "closed"
        state.metrics.writer.inc("pull_requests_closed", outcome=outcome)


class Intake:
    """The WSGI app: POST /webhooks/github here (through `handler`: `serve`, maybe wrapped
    in a traces middleware), anything else to `rest` (Flask's app)."""

    def __init__(
        self, state: Onloop, rest: WSGIApplication, wrap: WsgiWrapper | None = None
    ) -> None:
        self.state, self.rest = state, rest
        self.handler: WSGIApplication = wrap(self.serve) if wrap else self.serve

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return self.rest(environ, start_response)
        return self.handler(environ, start_response)

    def serve(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            answer = _answer(405, error="only POST is allowed here")
            answer.headers["Allow"] = "POST"
            return answer(start_response)
        return github(self.state, environ)(start_response)


def _body(state: Onloop, environ: WSGIEnvironment) -> bytes:
    """The whole body, at most ONLOOP_MAX_BODY_BYTES (else RequestEntityTooLarge), as
    Flask would read it: by its Content-Length, or to the end of a chunked one."""
    limit = state.settings.max_body_bytes
    length = get_content_length(environ)
    if length is None:  # chunked (or no body): werkzeug's reads to the end, bounded
        return get_input_stream(environ, max_content_length=limit).read()
    if length > limit:
        raise RequestEntityTooLarge()
    body: bytes = environ["wsgi.input"].read(length)  # one read, not werkzeug's loop
    if len(body) < length:  # the client hung up before the end
        raise ClientDisconnected()
    return body


def github(state: Onloop, environ: WSGIEnvironment) -> Response:
    try:
        body = _body(state, environ)
    except RequestEntityTooLarge:
        state.metrics.delivery("unknown", "too_large")
        return _answer(413, error="payload too large")
    except HTTPException as exc:  # the body stopped arriving (app.cli.webworker's deadline)
        state.metrics.delivery("unknown", f"rejected_{exc.code}")
        return _answer(exc.code or 400, error=exc.description)
    secret = state.settings.webhook_secret
    try:
        event = Event.from_http(
            EnvironHeaders(environ), body, secret=secret.get_secret_value() if secret else ""
        )
    except BadRequest as exc:
        state.metrics.delivery("unknown", f"rejected_{exc.status}")
        return _answer(exc.status, error=exc.message)
    tracer = state.tracer
    if tracer is None:  # traces off: nothing more per delivery
        return _delivered(state, event, None)[0]
    attributes = {
        "onloop.delivery.guid": event.delivery_guid,
        "onloop.github.event": event.name,
        "onloop.github.action": event.action or "",
        "onloop.repo": event.repo or "",
    }
    with tracer.start_as_current_span("webhook.delivery", attributes=attributes) as span:
        response, result = _delivered(state, event, traceparent_of(span))
        span.set_attribute("onloop.delivery.status", response.status_code)
        if result is not None:
            span.set_attribute("onloop.delivery.outcome", str(result.outcome)[:200])
            span.set_attribute("onloop.job_ids", result.job_ids)
            if result.joined:  # jobs already live: they stay in the first delivery's trace
                span.set_attribute("onloop.job_ids.joined", result.joined)
        return response


def _delivered(
    state: Onloop, event: Event, traceparent: str | None
) -> tuple[Response, IntakeResult | None]:
    """Record a verified delivery and answer it; `traceparent` goes on the jobs it makes."""
    # Every line of this request, onloop's and the libraries', carries the delivery's GUID.
    with structlog.contextvars.bound_contextvars(delivery_guid=event.delivery_guid):
        result = _record(state, event, traceparent)
        if result is None:  # nothing recorded, so not acknowledged: GitHub shows it failed
            state.metrics.delivery(event.name, "503")
            response = _answer(503, error="database unavailable: deliver again later")
            response.headers["Retry-After"] = str(RETRY_AFTER)
            return response, None
        state.metrics.delivery(event.name, str(result.status))
        if result.status == 400:
            state.log.info("delivery.rejected", gh_event=event.name, error=result.outcome)
            return _answer(400, error=result.outcome), result
        if result.status != 200 and (event.name, event.action) == ("pull_request", "closed"):
            _count_closed_pull(state, event)
        state.log.info(
            "delivery.recorded",
            gh_event=event.name,
            action=event.action,
            repo=event.repo,
            status=result.status,
            outcome=result.outcome,
            jobs=result.job_ids,
        )
    if result.status == 204:
        return _answer(204, outcome=result.outcome), result
    response = _answer(
        result.status,
        outcome=result.outcome,
        jobs=result.job_ids,
        joined=result.joined,
        cancelled=result.cancelled,
    )
    return response, result
