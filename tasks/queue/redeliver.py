"""Ask GitHub again for deliveries that never reached onloop (GitHub does not retry them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from celery import Celery
from sqlalchemy import select

from app.db import Database
from app.logs import get_logger
from app.models import Delivery
from app.settings import Settings

log = get_logger("onloop.redeliver")


def missed_deliveries(settings: Settings, db: Database, since: datetime) -> dict[str, int]:
    """GUIDs with no successful attempt that onloop never recorded → the newest attempt's id.

    https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks
    """
    import app.github as gh

    attempts = gh.list_hook_deliveries(settings, since)
    ok: set[str] = set()
    latest: dict[str, tuple[datetime, int]] = {}
    for attempt in attempts:
        guid = str(attempt["guid"])
        if 200 <= int(attempt.get("status_code") or 0) < 300:
            ok.add(guid)
        when = _parse_time(str(attempt["delivered_at"]))
        if guid not in latest or when > latest[guid][0]:
            latest[guid] = (when, int(attempt["id"]))
    candidates = set(latest) - ok
    if not candidates:
        return {}
    with db.sessions() as s:
        known = set(s.scalars(select(Delivery.guid).where(Delivery.guid.in_(candidates))))
    return {guid: latest[guid][1] for guid in sorted(candidates - known)}


def redeliver_missed(settings: Settings, db: Database, since: datetime) -> list[str]:
    """Request a redelivery for each missed delivery; returns their GUIDs."""
    import app.github as gh

    missed = missed_deliveries(settings, db, since)
    for guid, delivery_id in missed.items():
        gh.redeliver(settings, delivery_id)
        log.info("redelivery requested", delivery_id=guid, attempt=delivery_id)
    return list(missed)


def _parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def register(celery: Celery, settings: Settings) -> None:
    @celery.task(name="onloop.redeliver_missed", ignore_result=True)
    def _redeliver_missed() -> list[str]:
        from tasks.jobs import database

        since = datetime.now(UTC) - timedelta(seconds=settings.redeliver_interval * 2)
        return redeliver_missed(settings, database(settings), since)
