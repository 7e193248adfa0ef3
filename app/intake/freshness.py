"""How long ago a person acted: a comment or label delivery older than a set age starts no work.

GitHub signs a delivery's body but not when it was sent, and a new X-GitHub-Delivery GUID is
all a replay needs, so a captured body (a leaked log, GitHub's own "Recent deliveries" page)
could be sent again much later. The time of the act itself is in the signed body: a
comment's `created_at`, a review's `submitted_at`, and for a label the issue's `updated_at`,
which labelling sets (https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from app.core.timeutil import parse_time
from app.intake.events import Event

# (event, action) -> (object, field) of the moment the person acted, for the deliveries that
# a person's act starts work from.
ACTED_AT: Mapping[tuple[str, str], tuple[str, str]] = MappingProxyType(
    {
        ("issue_comment", "created"): ("comment", "created_at"),
        ("issues", "labeled"): ("issue", "updated_at"),
        ("pull_request_review", "submitted"): ("review", "submitted_at"),
        ("pull_request_review_comment", "created"): ("comment", "created_at"),
    }
)


def acted_at(event: Event) -> datetime | None:
    """When the person acted, as the signed body says; None when it says nothing usable."""
    where = ACTED_AT.get((event.name, event.action or ""))
    if where is None:
        return None
    holder: Mapping[str, object] = event.payload.get(where[0], {})  # type: ignore[assignment]
    stamp = holder.get(where[1])
    if not isinstance(stamp, str):
        return None
    try:
        return parse_time(stamp)
    except ValueError:
        return None


def is_stale(event: Event, now: datetime, max_age: float) -> bool:
    """True for a comment or label delivery older than `max_age` seconds, or with no time at
    all (GitHub always sends one: a body without it was not GitHub's). Other events are never
    stale here; a time ahead of `now` (clock skew) is not stale."""
    if (event.name, event.action or "") not in ACTED_AT:
        return False
    when = acted_at(event)
    return when is None or now - when > timedelta(seconds=max_age)


def refreshed(data: Mapping[str, Any], event_name: str, now: datetime) -> dict[str, Any]:
    """A copy of `data` with `now` as the time of the act (for `onloop replay --fresh` and
    tests that send recorded payloads); other events are copied unchanged."""
    out = copy.deepcopy(dict(data))
    where = ACTED_AT.get((event_name, str(out.get("action") or "")))
    holder = out.get(where[0]) if where else None
    if where is not None and isinstance(holder, dict):
        stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        holder[where[1]] = stamp
        if where[0] == "comment":
            holder["updated_at"] = stamp
    return out
