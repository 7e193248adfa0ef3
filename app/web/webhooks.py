"""POST /webhooks/github: verify the raw body, record the delivery, answer fast."""

from __future__ import annotations

import sqlalchemy.exc
import structlog
from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from app.core.tracing import traceparent_of
from app.intake.events import OUTCOME_HEADER, BadRequest, Event
from app.intake.record import IntakeResult, record
from app.store.db import Database
from app.web.state import Onloop, onloop

bp = Blueprint("webhooks", __name__)

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


def _answer(status: int, **body: object) -> Response:
    if status == 204:
        response = Response(status=204, headers={OUTCOME_HEADER: str(body.get("outcome", ""))})
        del response.headers["Content-Type"]  # no body, so no type (Flask's default is HTML)
        return response
    response = jsonify(body)
    response.status_code = status
    return response


def _count_closed_pull(state: Onloop, event: Event) -> None:
    """onloop's own pull requests (branches `onloop/...`) merged or closed: the merge rate."""
    pull = event.payload.get("pull_request", {})
    if pull.get("head", {}).get("ref", "").startswith("onloop/"):
        outcome = "merged" if pull.get("merged") else "closed"
        state.metrics.writer.inc("pull_requests_closed", outcome=outcome)


@bp.post("/webhooks/github")
def github() -> Response:
    state = onloop(current_app)
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        state.metrics.delivery("unknown", "too_large")
        return _answer(413, error="payload too large")
    secret = state.settings.webhook_secret
    try:
        event = Event.from_http(
            request.headers, body, secret=secret.get_secret_value() if secret else ""
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
