"""One logging pipeline: structlog and stdlib records rendered alike, as JSON lines or console."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

import structlog
from structlog.types import EventDict, Processor

# GitHub tokens (installation, user, OAuth, refresh, fine-grained) and JWTs: never in a line.
# No word boundary in front: in a rendered line a token may follow an escaped newline (`\n`)
# or a colour code, and the prefixes are distinctive enough on their own.
TOKEN_PATTERN = re.compile(
    r"(?:gh[pousr]_[A-Za-z0-9_]{8,}|github_pat_[A-Za-z0-9_]{8,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"
)
REDACTED = "[redacted]"
# At DEBUG these print response bodies and redirect URLs: installation tokens from
# POST /app/installations/{id}/access_tokens and pre-signed log URLs. Never below INFO.
NOISY = ("github", "urllib3", "requests")


class OnloopHandler(logging.StreamHandler[TextIO]):
    """The root logger's one handler; configure_logging replaces it, never adds a second."""


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return TOKEN_PATTERN.sub(REDACTED, value)
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def redact_values(logger: Any, method: str, event: EventDict) -> EventDict:
    """Before rendering: every string a record carries (its message, bound values, the
    formatted traceback) with tokens replaced, before any escaping could hide one."""
    return {key: _scrub(value) for key, value in event.items()}


def redact(logger: Any, method: str, line: str | bytes | EventDict) -> str:
    """The last step, after the renderer: whatever a record carried (PyGithub's DEBUG
    bodies included), its rendered line holds no token."""
    text = line.decode() if isinstance(line, bytes) else str(line)
    return TOKEN_PATTERN.sub(REDACTED, text)


def _shared() -> list[Processor]:
    """What every record gets, from structlog or not: the bound context (delivery_guid,
    job_id, repo, kind), level, logger name and an ISO UTC timestamp."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def formatter(json: bool, colors: bool = False) -> structlog.stdlib.ProcessorFormatter:
    """The formatter of onloop's handler: JSON lines (tracebacks inside the line) or console."""
    # Tracebacks are formatted as plain text before rendering, in both modes, so they are
    # redacted like the rest; the console's pretty (rich) tracebacks would print the
    # frames' local variables: secrets among them.
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(
            colors=colors, exception_formatter=structlog.dev.plain_traceback
        )
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact_values,
            renderer,
            redact,
        ],
    )


def configure_logging(
    level: str = "INFO", json: bool = True, stream: TextIO | None = None
) -> logging.Handler:
    """Route structlog and the stdlib root logger through one handler on `stream` (stderr).
    Idempotent: called again, it replaces its own handler. Returns the handler."""
    numeric = logging.getLevelName(str(level).upper())
    numeric = numeric if isinstance(numeric, int) else logging.INFO
    out = stream if stream is not None else sys.stderr
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    # StreamHandler writes each record whole (message and newline in one write, under its
    # lock), so lines from many threads never interleave.
    handler = OnloopHandler(out)
    handler.setFormatter(formatter(json, colors=not json and _is_tty(out)))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, OnloopHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)  # warnings too: a line on logger `py.warnings`, same format
    floor = max(logging.INFO, numeric)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(floor)
    return handler


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
