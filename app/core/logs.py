"""One logging pipeline: structlog and stdlib records rendered alike, as JSON lines or console."""

from __future__ import annotations

import json as jsonlib
import logging
import os
import re
import secrets
import select
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


# The most a write(2) to a pipe puts in one piece: web workers, Celery children and the
# masters share one stdout/stderr pipe, and a longer write can be interleaved with theirs.
LINE_LIMIT = select.PIPE_BUF
# A JSON line is ASCII (escaped); quoted once more, a piece of it at most doubles.
_PIECE = (LINE_LIMIT - 512) // 2


class OnloopHandler(logging.StreamHandler[TextIO]):
    """The root logger's one handler; configure_logging replaces it, never adds a second.
    Each line leaves in one write(2) of at most LINE_LIMIT bytes, under the handler's lock:
    whole across threads and across the processes sharing the pipe. A longer JSON record
    leaves as `log.part` lines instead (split_record), each one whole JSON."""

    def __init__(self, stream: TextIO, json: bool = True) -> None:
        super().__init__(stream)
        self.json = json

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            lines = split_record(text) if self.json else [text]
            fd = _fileno(self.stream)
            if fd is None:
                self.stream.write("".join(line + "\n" for line in lines))
                self.flush()
                return
            self.stream.flush()  # whatever went through the text stream goes first
            for line in lines:
                _write_all(fd, (line + "\n").encode("utf-8", "backslashreplace"))
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def split_record(line: str) -> list[str]:
    """`line` itself when it fits in one pipe write; else `log.part` lines of at most
    LINE_LIMIT bytes each, carrying the record's level, logger and timestamp, a `record` id
    and `part`/`parts`: their `text`s joined in order are the record's JSON line."""
    if len(line.encode("utf-8", "backslashreplace")) + 1 <= LINE_LIMIT:
        return [line]
    try:
        whole = jsonlib.loads(line)
    except ValueError:
        whole = {}
    head = whole if isinstance(whole, dict) else {}
    keep = {k: str(head[k])[:64] for k in ("timestamp", "level", "logger") if k in head}
    size = _PIECE if line.isascii() else _PIECE // 3  # `\uXXXX`: six characters for one
    pieces = [line[i : i + size] for i in range(0, len(line), size)]
    record = secrets.token_hex(6)
    return [
        jsonlib.dumps(
            {
                **keep,
                "event": "log.part",
                "record": record,
                "part": n,
                "parts": len(pieces),
                "text": piece,
            }
        )
        for n, piece in enumerate(pieces, 1)
    ]


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and friends: no descriptor
        return None


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


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
    handler = OnloopHandler(out, json=json)
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
