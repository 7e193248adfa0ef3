"""What the pages share in one web process: the sessions, the access check, the job events;
none of it without Redis (the pages then answer 503)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import redis
from flask import Flask

from app.core.jobevents import JobEvents
from app.core.settings import Settings
from app.core.telemetry import Telemetry
from app.github.clients import GitHubApp
from app.github.write_slots import WriteSlots
from app.store.db import Database
from app.web.pages.access import AccessCheck
from app.web.pages.session import Sessions

EXTENSION = "onloop_pages"


@dataclass
class Pages:
    settings: Settings
    db: Database
    sessions: Sessions
    access: AccessCheck
    events: JobEvents
    # Live streams this process serves at once: each holds a web thread, and webhook
    # deliveries must always find one. Past it a page polls instead.
    streams: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(1)
    )


def build(settings: Settings, db: Database, meter: Telemetry) -> Pages | None:
    """The pages' parts for `settings`; None without ONLOOP_REDIS_URL."""
    if not settings.redis_url:
        return None
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    github = GitHubApp(settings, WriteSlots.for_settings(settings), meter)
    return Pages(
        settings=settings,
        db=db,
        sessions=Sessions(client, settings.session_hours, settings.public_url),
        access=AccessCheck(settings, db, github, client),
        events=JobEvents(settings.redis_url),
        streams=threading.BoundedSemaphore(max(1, settings.web_threads // 2)),
    )


def pages_of(app: Flask) -> Pages | None:
    found: Pages | None = app.extensions.get(EXTENSION)
    return found
