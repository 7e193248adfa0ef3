"""A schedule runs in its owner's name only once they approved it as it is: whoever can push
`.github/onloop.yml` writes the entry, and may not be its owner."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from app.core.settings import Settings
from app.policy.repo_config import RepoConfig
from app.policy.schedules import Schedule, ScheduleKind
from app.store import schedule_approvals
from app.store.db import Database


def consented(schedule: Schedule, config: RepoConfig) -> dict[str, Any]:
    """What the owner approves: the entry, and what its jobs run or follow in their name
    (a change to the repository's fixers or checks asks them again)."""
    shown: dict[str, Any] = {"schedule": schedule.model_dump(mode="json")}
    if schedule.kind in (ScheduleKind.FIXERS, ScheduleKind.FIX_CI):
        shown["checks"] = config.checks.model_dump(mode="json")
        shown["sandbox"] = config.sandbox.model_dump(mode="json")
    else:
        shown["review"] = config.review.model_dump(mode="json")
    return shown


def version(schedule: Schedule, config: RepoConfig) -> tuple[str, str]:
    """The digest and the text of what the owner approves."""
    text = json.dumps(consented(schedule, config), indent=2, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), text


def approval_url(settings: Settings, approval_id: int) -> str:
    return f"{settings.public_url.rstrip('/')}/schedules/{approval_id}"


def unapproved(
    settings: Settings,
    db: Database,
    repo: str,
    schedule: Schedule,
    config: RepoConfig,
    owner_id: int,
) -> str | None:
    """Why the slot may not run yet (the owner has not approved this version), or None."""
    digest, text = version(schedule, config)
    row = schedule_approvals.ask(db, repo, schedule.name, digest, schedule.owner, owner_id, text)
    if row.approved_at is not None:
        return None
    return (
        f"@{schedule.owner} has not approved this schedule as it is now (it runs in their "
        f"name, and anyone who can push `.github/onloop.yml` may have written it); they can "
        f"approve it at {approval_url(settings, row.id)}"
    )
