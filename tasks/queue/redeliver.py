"""Ask GitHub again for deliveries that never reached onloop (GitHub does not retry them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from app.core.logs import get_logger
from app.core.settings import Settings
from app.core.timeutil import parse_time
from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Delivery, RedeliveryRequest, utcnow

log = get_logger("onloop.redeliver")


def missed_deliveries(github: GitHubApp, db: Database, since: datetime) -> dict[str, int]:
    """Delivery GUIDs with no successful attempt that onloop never recorded → the
    `hook_attempt_id` of the newest attempt, which `redeliver` names the delivery by.

    https://docs.github.com/en/webhooks/testing-and-troubleshooting-webhooks/redelivering-webhooks
    """
    attempts = github.list_hook_deliveries(since)
    ok: set[str] = set()
    latest: dict[str, tuple[datetime, int]] = {}  # delivery_guid → (when, hook_attempt_id)
    for attempt in attempts:
        delivery_guid = str(attempt["guid"])
        # 2xx: recorded. 4xx: onloop answered and refused it (bad signature, malformed body):
        # asking again brings the same body and the same answer. Timeouts (0) and 5xx are
        # missed.
        if 200 <= int(attempt.get("status_code") or 0) < 500:
            ok.add(delivery_guid)
        when = parse_time(str(attempt["delivered_at"]))
        if delivery_guid not in latest or when > latest[delivery_guid][0]:
            latest[delivery_guid] = (when, int(attempt["id"]))
    candidates = set(latest) - ok
    if not candidates:
        return {}
    with db.read() as s:
        known = set(s.scalars(select(Delivery.guid).where(Delivery.guid.in_(candidates))))
    return {guid: latest[guid][1] for guid in sorted(candidates - known)}


def note_request(db: Database, delivery_guid: str) -> None:
    """Remember that onloop asked for `delivery_guid` again, before asking: its body keeps the
    old time of the act, and intake lets only such GUIDs past the event-age check."""
    with db.transaction() as s:
        if s.get(RedeliveryRequest, delivery_guid) is None:
            s.add(RedeliveryRequest(guid=delivery_guid, requested_at=utcnow()))


def redeliver_missed(github: GitHubApp, db: Database, since: datetime) -> list[str]:
    """Request a redelivery for each missed delivery; returns their GUIDs."""
    missed = missed_deliveries(github, db, since)
    for delivery_guid, hook_attempt_id in missed.items():
        note_request(db, delivery_guid)
        github.redeliver(hook_attempt_id)
        log.info(
            "delivery.redelivery_requested",
            delivery_guid=delivery_guid,
            hook_attempt_id=hook_attempt_id,
        )
    return list(missed)


def sweep(settings: Settings, github: GitHubApp, db: Database) -> list[str]:
    """Beat's periodic task: redeliver what was missed over two sweep intervals."""
    since = datetime.now(UTC) - timedelta(seconds=settings.redeliver_interval * 2)
    return redeliver_missed(github, db, since)
