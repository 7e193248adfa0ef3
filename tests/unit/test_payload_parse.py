"""A delivery parsed by msgspec into the fields onloop reads gives the payload and the
problems that parsing it all with `json` and reading it field by field gives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.intake.events import Event, sign
from app.intake.payloads import checked_payload
from tests.doubles.webhooks import event_name, fixture_names, load_fixture

SECRET = "parse-secret"


def _both(name: str, data: Any) -> tuple[Event, tuple[Any, tuple[str, ...]]]:
    body = json.dumps(data).encode()
    headers = {
        "X-Hub-Signature-256": sign(body, SECRET),
        "X-GitHub-Event": event_name(name),
        "X-GitHub-Delivery": "guid-1",
    }
    event = Event.from_http(headers, body, secret=SECRET)
    return event, checked_payload(json.loads(body))


# Fields set to what GitHub does not send there: each sends the body down the slow path.
ODD: list[tuple[tuple[str, ...], object]] = [
    (("installation", "id"), "42"),
    (("sender", "id"), True),
    (("sender",), [1, 2]),
    (("repository", "full_name"), 7),
    (("action",), {"not": "a string"}),
    (("repository", "id"), 2**70),
    (("repository", "id"), 1.5),
]
# Fields GitHub may send as null, and strings no database stores: the fast path keeps them.
NULLS: list[tuple[tuple[str, ...], object]] = [
    (("sender", "login"), None),
    (("repository",), None),
    (("installation",), None),
    (("repository", "full_name"), "nul\x00"),
    (("repository", "full_name"), "x" * 500),
    (("repository", "id"), -1),
]


def _set(data: dict[str, Any], path: tuple[str, ...], value: object) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


@pytest.mark.parametrize("name", fixture_names())
def test_every_fixture_reads_the_same_by_either_parse(name: str) -> None:
    event, (payload, problems) = _both(name, load_fixture(name))
    assert event.payload == payload
    assert event.problems == problems == ()


@pytest.mark.parametrize("name", fixture_names())
@pytest.mark.parametrize(("path", "value"), ODD + NULLS)
def test_odd_and_null_fields_read_the_same_by_either_parse(
    name: str, path: tuple[str, ...], value: object
) -> None:
    data = load_fixture(name)
    _set(data, path, value)
    event, (payload, problems) = _both(name, data)
    assert event.payload == payload
    assert event.problems == problems
    if (path, value) in ODD:
        assert problems, "an odd field is named"


def test_the_fast_parse_keeps_only_the_fields_onloop_reads() -> None:
    data = load_fixture("issue_comment.created")
    event, _ = _both("issue_comment.created", data)
    assert "hooks_url" in data["repository"]
    assert set(event.data["repository"]) == {"id", "full_name", "default_branch"}  # type: ignore[call-overload]
