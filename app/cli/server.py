"""gunicorn embedding for `onloop web`: config/gunicorn.conf.py plus the app factory."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication

from app.core.settings import Settings
from app.web import create_app
from app.web.setup import new_code, setup_url

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "gunicorn.conf.py"


class OnloopServer(BaseApplication):
    """Each gunicorn worker builds its own app (and engine) after the fork; all of them ask
    for the one setup code made (and printed) before it."""

    def __init__(
        self,
        settings: Settings,
        bind: str,
        options: dict[str, Any] | None = None,
        setup_code: str | None = None,
    ):
        self.settings, self.bind, self.options = settings, bind, options or {}
        self.setup_code = setup_code
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
        # Each worker's metrics go to Redis once a second, not once a delivery.
        return create_app(self.settings, setup_code=self.setup_code, metrics_flush_every=1.0)


def serve(settings: Settings, bind: str, **options: Any) -> None:
    code = None
    if settings.app_id is None:  # /setup is open: to whoever reads this console only
        code = new_code()
        url = setup_url(settings, code)
        click.echo(f"onloop: no GitHub App is configured; open {url} to create one", err=True)
    OnloopServer(settings, bind, options, setup_code=code).run()
