"""The web half of `onloop dev`: gunicorn with the same settings, one process."""

from __future__ import annotations

import sys

from app.cli.server import serve
from app.core.logs import configure_logging
from app.core.settings import load_settings

if __name__ == "__main__":
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_json)
    serve(settings, sys.argv[1], workers=1)
