"""POST /webhooks/github: verify the raw body, record the delivery, answer fast."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from app.events import BadRequest, Event
from app.intake import record
from app.state import onloop

bp = Blueprint("webhooks", __name__)


def _answer(status: int, **body: object) -> Response:
    response = jsonify(body) if status != 204 else Response(status=204)
    response.status_code = status
    return response


@bp.post("/webhooks/github")
def github() -> Response:
    state = onloop(current_app)
    try:
        body = request.get_data(cache=False)
    except RequestEntityTooLarge:
        state.metrics.deliveries.labels(event="unknown", outcome="too_large").inc()
        return _answer(413, error="payload too large")
    secret = state.settings.webhook_secret
    try:
        event = Event.from_http(
            request.headers, body, secret=secret.get_secret_value() if secret else ""
        )
    except BadRequest as exc:
        state.metrics.deliveries.labels(event="unknown", outcome=f"rejected_{exc.status}").inc()
        return _answer(exc.status, error=exc.message)
    result = record(state.db, event, state.settings.fix_label)
    state.metrics.deliveries.labels(event=event.name, outcome=str(result.status)).inc()
    state.log.info(
        "delivery",
        delivery_id=event.delivery_id,
        gh_event=event.name,
        action=event.action,
        repo=event.repo,
        status=result.status,
        outcome=result.outcome,
        jobs=result.job_ids,
    )
    if result.status == 204:
        return _answer(204)
    return _answer(
        result.status,
        outcome=result.outcome,
        jobs=result.job_ids,
        joined=result.joined,
        cancelled=result.cancelled,
    )
