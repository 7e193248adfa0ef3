"""`schedules:` in `.github/onloop.yml`: named cron slots of work, each done in its owner's name."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Annotated

from croniter import CroniterBadDateError, croniter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# The most often a schedule may fire: a shorter gap between two slots is refused.
MIN_INTERVAL = timedelta(minutes=15)
# Cron's own five fields, or one of croniter's aliases; `@reboot` has no slot.
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# A name is part of a branch (`onloop/schedule-<name>`) and of the slot's row.
ScheduleName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")]
# https://docs.github.com/en/get-started/learning-about-github/types-of-github-accounts
Login = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")]


class ScheduleKind(StrEnum):
    """What a schedule does at its slot."""

    FIX_CI = "fix_ci"  # fix the default branch's CI when it is red: a PR from an onloop/ branch
    FIXERS = "fixers"  # run `checks.fix` in the sandbox; a PR when anything changed
    REVIEW_STALE = "review_stale"  # review open PRs older than `older_than_days`


class Schedule(BaseModel):
    """One entry of `schedules:`. Its slots are UTC times of its cron expression."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: ScheduleName
    cron: str
    kind: ScheduleKind
    owner: Login  # their stored token does the work; they need the trigger permission
    older_than_days: int = Field(default=7, ge=1, le=365)  # review_stale only

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return check_cron(value)

    def slot_at(self, now: datetime) -> datetime:
        """The latest slot at or before `now` (to the minute, UTC)."""
        return latest_slot(self.cron, now)


NEVER_BEFORE = datetime(2030, 1, 1, tzinfo=UTC)  # any fixed instant: every real slot recurs


def check_cron(value: str) -> str:
    """A five-field cron expression (or an alias) that fires at most every MIN_INTERVAL."""
    text = " ".join(value.split())
    if not (text in ALIASES or (len(text.split()) == 5 and croniter.is_valid(text))):
        raise ValueError(
            f"{text!r} is not a cron expression of five fields (minute hour day month weekday)"
        )
    try:  # a date that never comes (`0 0 31 2 *`) is valid to croniter, but has no slot
        latest_slot(text, NEVER_BEFORE)
    except CroniterBadDateError:
        raise ValueError(f"{text!r} names no date that exists") from None
    gap = _smallest_gap(croniter(text).expanded[0])
    if gap < MIN_INTERVAL:
        every = int(gap.total_seconds() // 60)
        limit = int(MIN_INTERVAL.total_seconds() // 60)
        raise ValueError(
            f"{text!r} fires every {every} minute(s); a schedule may fire at most every {limit}"
        )
    return text


def _smallest_gap(minutes: list[int | str]) -> timedelta:
    """The shortest time between two slots, from the minute field alone: the other fields
    name whole hours, days or months, so two slots in different hours are an hour apart."""
    if minutes == ["*"]:
        return timedelta(minutes=1)
    ordered = sorted(int(m) for m in minutes)
    gaps = [b - a for a, b in pairwise(ordered)]
    gaps.append(60 - ordered[-1] + ordered[0])  # round the hour
    return timedelta(minutes=min(gaps))


def latest_slot(cron: str, now: datetime) -> datetime:
    """The latest time at or before `now` that `cron` names (croniter's get_prev skips the
    start itself, hence the next minute as the start)."""
    start = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    slot: datetime = croniter(cron, start).get_prev(datetime)
    return slot


def duplicate_names(schedules: list[Schedule]) -> list[str]:
    """The names that more than one schedule has (a slot is kept per name)."""
    counts = Counter(s.name for s in schedules)
    return sorted(name for name, count in counts.items() if count > 1)
