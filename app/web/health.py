"""Operational routes: /healthz (alive), /readyz (database reachable), /metrics."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from app.web.state import onloop

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz() -> Response:
    state = onloop(current_app)
    try:
        with state.db.read() as s:
            s.execute(text("SELECT 1"))
    except Exception as exc:
        response = jsonify(status="unavailable", database=type(exc).__name__)
        response.status_code = 503
        return response
    return jsonify(status="ok")


@bp.get("/metrics")
def metrics() -> Response:
    registry = onloop(current_app).metrics.registry
    # content_type, not mimetype: CONTENT_TYPE_LATEST has its charset already
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
