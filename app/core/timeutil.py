"""Times as GitHub writes them: ISO 8601, `Z` for UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: str) -> datetime:
    """An ISO 8601 time (`2024-05-01T12:00:00Z`, or with an offset) as an aware datetime; one
    without a zone is taken as UTC."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
