"""Payload fields keep to what onloop stores: a value of the wrong type, beyond its column's
bounds, or a string no database stores, reads as absent and is named with its path."""

from __future__ import annotations

from app.intake.events import Event
from app.intake.payloads import MAX_PROBLEMS, checked_payload, read_payload


def test_bounds_follow_the_columns() -> None:
    data = {
        "installation": {"id": 2**63},
        "issue": {"number": 2**31, "title": "kept"},
        "sender": {"login": "a" * 101, "id": 2**63 - 1},
        "repository": {"full_name": "o/" + "r" * 199, "id": -1},
        "action": "x" * 65,
    }
    payload, problems = checked_payload(data)
    assert payload == {
        "installation": {},
        "issue": {"title": "kept"},
        "sender": {"id": 2**63 - 1},
        "repository": {},
    }
    assert problems == (
        "action: longer than 64 characters",
        "sender.login: longer than 100 characters",
        "repository.id: expected an integer from 0 to 9223372036854775807",
        "repository.full_name: longer than 200 characters",
        "installation.id: expected an integer from 0 to 9223372036854775807",
        "issue.number: expected an integer from 0 to 2147483647",
    )


def test_wrong_types_are_named_with_their_path_and_null_is_just_absent() -> None:
    data = {
        "installation": "957387",
        "repository": None,
        "issue": {"body": None, "number": "7"},
        "workflow_run": {"pull_requests": [{"number": 1}, {"number": True}, "o/r"]},
    }
    payload, problems = checked_payload(data)
    assert payload == {"issue": {}, "workflow_run": {"pull_requests": [{"number": 1}, {}]}}
    assert set(problems) == {
        "installation: expected an object",
        "issue.number: expected an integer",
        "workflow_run.pull_requests[1].number: expected an integer",
        "workflow_run.pull_requests[2]: expected an object",
    }


def test_strings_a_database_cannot_store_are_absent() -> None:
    for bad in ("nul\x00", "half \ud800 pair"):
        payload, problems = checked_payload({"sender": {"login": bad}, "action": "ok é"})
        assert payload == {"sender": {}, "action": "ok é"}
        assert problems == ("sender.login: contains a NUL character or an unpaired surrogate",)


def test_problems_are_capped_and_the_event_reports_them() -> None:
    data = {"repositories": [7] * 10_000}
    assert len(checked_payload(data)[1]) == MAX_PROBLEMS
    assert read_payload(data) == {"repositories": []}
    assert Event("installation", "g", data).problems[0] == "repositories[0]: expected an object"
