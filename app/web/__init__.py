"""The Flask app factory: `create_app(settings)` builds everything; nothing at import time."""

from __future__ import annotations

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from app.core.kinds import KINDS, Kinds, sandboxed
from app.core.logs import get_logger
from app.core.outbox_bell import OutboxBell
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.core.tracing import Tracing
from app.store.db import Database
from app.web import health, oauth, setup, webhooks
from app.web.metrics import Metrics
from app.web.pages import jobs as pages
from app.web.state import EXTENSION, Onloop


def create_app(
    settings: Settings,
    db: Database | None = None,
    kinds: Kinds = KINDS,
    setup_code: str | None = None,
    tracing: Tracing | None = None,
    metrics_flush_every: float | None = None,
) -> Flask:
    """Build the web app for `settings`; pass `db` to share an engine (tests), `kinds` for
    another table of job kinds (app.core.kinds.KINDS by default), `setup_code` for the code
    /setup asks for (printed on the console by whoever starts the server; a new one if None),
    `tracing` for traces of its own (tests); by default as the OTEL_* variables say;
    `metrics_flush_every` for metrics gathered that many seconds before they go to Redis
    (`onloop web`: one round trip a second, not one per delivery; None: each at once)."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    database = db or Database(settings.database_url)
    traces = tracing if tracing is not None else Tracing.from_env("onloop-web")
    traces.instrument_web(app, database.engine)
    state = Onloop(
        settings=settings,
        db=database,
        metrics=Metrics(
            database,
            Telemetry(settings.redis_url, flush_every=metrics_flush_every),
            settings,
            sandboxed(kinds),
        ),
        log=get_logger("onloop.web"),
        kinds=kinds,
        tracer=traces.tracer("onloop.web"),
        bell=OutboxBell(settings.redis_url),
    )
    app.extensions[EXTENSION] = state

    app.register_blueprint(health.bp)
    app.register_blueprint(oauth.bp)
    pages.init_app(app)  # /jobs/<id> behind a GitHub sign-in
    setup.init_app(app, settings, code=setup_code)  # /setup: only while no App is configured

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        response = jsonify(error=exc.description)
        response.status_code = exc.code or 500
        return response

    # POST /webhooks/github skips Flask (see app.web.webhooks); all else goes on to it.
    app.wsgi_app = webhooks.Intake(state, app.wsgi_app, traces.wsgi_middleware())  # type: ignore[method-assign]
    return app
