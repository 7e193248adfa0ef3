"""Structured logging with structlog: JSON lines carrying delivery, job and repository ids."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "INFO", json: bool = True) -> None:
    """Set up structlog and the stdlib root logger once per process."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    # At DEBUG these print response bodies and redirect URLs: installation tokens from
    # POST /app/installations/{id}/access_tokens and pre-signed log URLs. Never below INFO.
    numeric = logging.getLevelName(str(level).upper())
    floor = max(logging.INFO, numeric if isinstance(numeric, int) else logging.INFO)
    for noisy in ("github", "urllib3", "requests"):
        logging.getLogger(noisy).setLevel(floor)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
