"""What the app factory builds once and every request shares: settings, database, metrics."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from flask import Flask

from app.core.kinds import Kinds
from app.core.settings import Settings
from app.store.db import Database
from app.web.metrics import Metrics

EXTENSION = "onloop"


@dataclass
class Onloop:
    settings: Settings
    db: Database
    metrics: Metrics
    log: structlog.stdlib.BoundLogger
    kinds: Kinds  # the job kinds `decide` may route to


def onloop(app: Flask) -> Onloop:
    state: Onloop = app.extensions[EXTENSION]
    return state
