"""`parse_time`: GitHub's ISO 8601 times (webhook deliveries, token expiries) as aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.core.timeutil import parse_time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T12:00:00Z", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00.250Z", datetime(2024, 5, 1, 12, 0, 0, 250_000, tzinfo=UTC)),
        ("2024-05-01T14:00:00+02:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),
        ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12, tzinfo=UTC)),  # no zone: UTC
    ],
)
def test_times_are_aware_and_compare_in_utc(text: str, expected: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == expected and parsed.utcoffset() is not None


def test_an_offset_is_kept() -> None:
    assert parse_time("2024-05-01T14:00:00+02:00").utcoffset() == timedelta(hours=2)
    assert parse_time("2024-05-01T14:00:00+02:00").tzinfo == timezone(timedelta(hours=2))


def test_not_a_time_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_time("yesterday")
