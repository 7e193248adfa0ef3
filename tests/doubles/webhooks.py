"""Signed webhook deliveries from ../shared/fixtures/webhooks, and table counts, for tests."""

from __future__ import annotations

import copy
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from app.intake.events import sign
from app.intake.freshness import refreshed
from app.store.db import Database

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = next(
    p
    for p in (
        Path(os.environ.get("ONLOOP_FIXTURES", "/nonexistent")),
        ROOT.parent / "shared" / "fixtures" / "webhooks",
        ROOT / "tests" / "fixtures" / "webhooks",
    )
    if p.is_dir()
)
SECRET = "test-webhook-secret-0123456789abcdef"
TABLES = (
    "outbox",
    "job_triggers",
    "redelivery_requests",
    "jobs",
    "deliveries",
    "installations",
    "repo_configs",
    "user_accounts",
    "pauses",
    "audit_log",
    "job_output",
    "onloop_pulls",
    "schedule_slots",
    "onloop_branch_commits",
)


def load_fixture(name: str) -> dict[str, Any]:
    """A payload from shared/fixtures/webhooks, as a fresh dict the test may edit."""
    return copy.deepcopy(json.loads((FIXTURES / f"{name}.json").read_text()))


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def event_name(fixture: str) -> str:
    return fixture.split(".", 1)[0]


def signed_headers(body: bytes, event: str, guid: str | None = None) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": guid or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, SECRET),
    }


def deliver(
    client: Any, event: str, payload: dict[str, Any], guid: str | None = None, *, fresh: bool = True
) -> Any:
    """POST a signed delivery through the Flask test client. The fixtures were recorded years
    ago, so a comment's or label's time is stamped `now` first (onloop ignores old ones),
    unless `fresh` is False."""
    if fresh:
        payload = refreshed(payload, event, datetime.now(UTC))
    body = json.dumps(payload).encode()
    return client.post("/webhooks/github", data=body, headers=signed_headers(body, event, guid))


def counts(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        return {
            t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in TABLES
        }
