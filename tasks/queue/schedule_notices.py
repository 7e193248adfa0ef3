"""What beat's schedule tick says about a schedule it skips: once per reason, not per slot,
in an audit entry and one issue in the repository (there is no thread to answer on)."""

from __future__ import annotations

from datetime import datetime

from github import GithubException
from github.Repository import Repository

from app.core.logs import get_logger
from app.core.markdown import inline_code
from app.core.settings import Settings
from app.github.comments import open_issue, upsert_issue
from app.policy.schedules import Schedule
from app.store import audit
from app.store.db import Database
from app.store.schedule_slots import Claim, ScheduleOutcome
from tasks.queue.schedule_configs import Installed
from tasks.runner.repo_settings import CONFIG_PATH

log = get_logger("onloop.schedules")
SKIPPED = "schedule.skipped"  # audit: a slot whose owner cannot act, said once per reason


def say_skipped(
    settings: Settings,
    db: Database,
    repo: Repository | None,
    place: Installed,
    schedule: Schedule,
    slot: datetime,
    claimed: Claim,
    reason: str,
) -> None:
    """Once per reason, not per slot: an audit entry and one issue in the repository (found
    again by its marker and edited in place), as there is no thread to answer on."""
    previous = claimed.previous
    if previous is not None and previous.outcome == ScheduleOutcome.SKIPPED:
        if previous.detail == reason:
            return
    detail = {"schedule": schedule.name, "slot": slot.isoformat(), "reason": reason}
    audit.record(db, SKIPPED, repo=place.repo, actor=schedule.owner, detail=detail)
    if repo is None:
        return
    body = (
        f"onloop skipped the schedule {inline_code(schedule.name)} of `{CONFIG_PATH}` at "
        f"{slot:%Y-%m-%d %H:%M} UTC: {reason}. It skips each slot until this changes, and "
        "says so here once. Fix it, or change the schedule's `owner`."
    )
    title = f"onloop: the schedule {schedule.name} is skipped"
    try:
        upsert_issue(repo, _issue_key(schedule), title, body, settings.bot_login)
    except GithubException as exc:  # the audit entry and the slot's row still say it
        log.warning("schedule.unsaid", repo=place.repo, schedule=schedule.name, status=exc.status)


def said_resolved(settings: Settings, repo: Repository, schedule: Schedule, slot: datetime) -> None:
    """The schedule fires again after it was skipped: its issue says so and is closed."""
    try:
        issue = open_issue(repo, _issue_key(schedule), settings.bot_login)
        if issue is not None:
            issue.create_comment(f"The schedule fired again at {slot:%Y-%m-%d %H:%M} UTC.")
            issue.edit(state="closed")
    except GithubException as exc:  # the issue stays open; the slot's row says it fired
        log.warning(
            "schedule.unsaid", repo=repo.full_name, schedule=schedule.name, status=exc.status
        )


def _issue_key(schedule: Schedule) -> str:
    return f"schedule-{schedule.name}"
