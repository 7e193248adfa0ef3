"""`schedules:` in `.github/onloop.yml`: parsed, validated with the line that is wrong, too
frequent cron refused, unknown keys reported; slots to the minute."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.policy.repo_config import ConfigError, parse_repo_config
from app.policy.schedules import ScheduleKind, check_cron, latest_slot

GOOD = """\
checks:
  fix: ["ruff format ."]
schedules:
  - name: nightly-fixers
    cron: "0 3 * * *"
    kind: fixers
    owner: alice
  - name: stale
    cron: "@weekly"
    kind: review_stale
    owner: carol
    older_than_days: 14
"""


def test_schedules_parse_with_their_kinds_and_defaults() -> None:
    config, unknown = parse_repo_config(GOOD)
    assert unknown == []
    fixers, stale = config.schedules
    assert (fixers.name, fixers.kind, fixers.owner) == (
        "nightly-fixers",
        ScheduleKind.FIXERS,
        "alice",
    )
    assert stale.older_than_days == 14 and stale.cron == "@weekly"
    assert parse_repo_config("commands: [fix]\n")[0].schedules == []


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(text)
    return caught.value


def test_a_cron_firing_more_often_than_every_15_minutes_is_refused_naming_its_line() -> None:
    text = GOOD.replace('cron: "@weekly"', 'cron: "*/5 * * * *"')
    error = error_of(text)
    assert error.line == 9
    assert "every 5 minute(s)" in error.message and "schedules.1.cron" in error.message
    # every quarter of an hour is the most often allowed; two minutes a quarter apart too
    assert check_cron("*/15 * * * *") == "*/15 * * * *"
    assert check_cron("7,22,37,52 * * * *")
    for often in ("* * * * *", "0,10 * * * *", "5-10 3 * * *", "59,2 * * * *"):
        with pytest.raises(ValueError, match="at most every 15"):
            check_cron(often)


@pytest.mark.parametrize(
    ("replace", "line", "says"),
    [
        ('cron: "0 3 * * *"', 5, "not a cron expression"),  # six fields: seconds are not cron's
        ("kind: fixers", 6, "schedules.0.kind"),
        ("owner: alice", 7, "schedules.0.owner"),
        ("name: nightly-fixers", 4, "schedules.0.name"),
    ],
)
def test_bad_entries_name_their_line(replace: str, line: int, says: str) -> None:
    bad = {
        'cron: "0 3 * * *"': 'cron: "0 3 * * * 5"',
        "kind: fixers": "kind: deploy",
        "owner: alice": "owner: -not-a-login",
        "name: nightly-fixers": "name: Nightly Fixers!",
    }[replace]
    error = error_of(GOOD.replace(replace, bad))
    assert error.line == line, error
    assert says in str(error)


def test_a_missing_owner_and_duplicate_names_are_refused() -> None:
    error = error_of(GOOD.replace("    owner: alice\n", ""))
    assert error.line == 4 and "schedules.0.owner" in error.message  # the entry's line
    twice = GOOD.replace("name: stale", "name: nightly-fixers")
    error = error_of(twice)
    assert error.line == 3 and "two schedules are named nightly-fixers" in error.message


def test_unknown_keys_of_a_schedule_are_reported_not_fatal() -> None:
    config, unknown = parse_repo_config(
        GOOD.replace("owner: carol", "owner: carol\n    colour: red")
    )
    assert unknown == ["schedules.1.colour"]
    assert len(config.schedules) == 2


def test_bad_yaml_in_schedules_is_answered_with_its_line() -> None:
    error = error_of(GOOD.replace("kind: fixers", "kind: [fixers"))
    assert error.line is not None and error.line >= 6 and "not valid YAML" in error.message


def test_the_slot_is_the_latest_cron_time_at_or_before_now() -> None:
    at = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
    assert latest_slot("0 3 * * *", at) == at  # the slot's own minute counts
    assert latest_slot("0 3 * * *", at.replace(second=59)) == at
    assert latest_slot("0 3 * * *", at.replace(hour=2, minute=59)) == at.replace(day=3)
    assert latest_slot("*/15 * * * *", at.replace(minute=44)) == at.replace(minute=30)


def test_a_cron_naming_no_date_that_exists_is_refused_naming_its_line() -> None:
    """`0 0 31 2 *` is valid to croniter but has no slot: every tick would raise on it."""
    error = error_of(GOOD.replace('cron: "0 3 * * *"', 'cron: "0 0 31 2 *"'))
    assert error.line == 5 and "names no date that exists" in str(error), error
