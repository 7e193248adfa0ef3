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
) -> Flask:
    """Build the web app for `settings`; pass `db` to share an engine (tests), `kinds` for
    another table of job kinds (app.core.kinds.KINDS by default), `setup_code` for the code
    /setup asks for (printed on the console by whoever starts the server; a new one if None),
    `tracing` for traces of its own (tests); by default as the OTEL_* variables say."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    database = db or Database(settings.database_url)
    traces = tracing if tracing is not None else Tracing.from_env("onloop-web")
    traces.instrument_web(app, database.engine)
    app.extensions[EXTENSION] = Onloop(
        settings=settings,
        db=database,
        metrics=Metrics(database, Telemetry(settings.redis_url), settings, sandboxed(kinds)),
        log=get_logger("onloop.web"),
        kinds=kinds,
        tracer=traces.tracer("onloop.web"),
        bell=OutboxBell(settings.redis_url),
    )

    app.register_blueprint(webhooks.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(oauth.bp)
    pages.init_app(app)  # /jobs/<id> behind a GitHub sign-in
    setup.init_app(app, settings, code=setup_code)  # /setup: only while no App is configured

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        response = jsonify(error=exc.description)
        response.status_code = exc.code or 500
        return response

    return app
