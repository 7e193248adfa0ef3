"""gunicorn embedding for `onloop web`: config/gunicorn.conf.py plus the app factory."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from app.core.settings import Settings
from app.web import create_app

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"


class OnloopServer(BaseApplication):
    """Each gunicorn worker builds its own app (and engine) after the fork."""

    def __init__(self, settings: Settings, bind: str, options: dict[str, Any] | None = None):
        self.settings, self.bind, self.options = settings, bind, options or {}
        super().__init__()

    def load_config(self) -> None:
        values = {
            k: v for k, v in runpy.run_path(str(CONFIG_FILE)).items() if not k.startswith("_")
        }
        values.update(self.options)
        values["bind"] = [self.bind]
        for key, value in values.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(self.settings)


def serve(settings: Settings, bind: str, **options: Any) -> None:
    OnloopServer(settings, bind, options).run()
