"""onloop's core and web side; `app.web.create_app(settings)` builds the Flask app."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """`from app import create_app` keeps working (the interface contract's name)."""
    if name == "create_app":
        # imported on first use only: the worker imports app.core without loading Flask
        from app.web import create_app

        return create_app
    raise AttributeError(f"module 'app' has no attribute {name!r}")
