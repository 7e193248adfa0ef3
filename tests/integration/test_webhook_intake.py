"""POST /webhooks/github: bad input answered with the right status and nothing recorded;
good input recorded once, with its jobs and outbox rows, before the answer."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.store.db import Database
from app.store.models import Delivery, Installation, Job, JobState, Outbox
from tests.doubles.webhooks import (
    SECRET,
    TABLES,
    counts,
    deliver,
    event_name,
    fixture_names,
    load_fixture,
    signed_headers,
)

EMPTY = {t: 0 for t in TABLES}


def fix_label_payload(number: int = 1) -> dict[str, Any]:
    data = load_fixture("issues.labeled.with-organization")
    data["label"]["name"] = "agent:fix"
    data["issue"]["number"] = number
    data["installation"] = {"id": 42}
    return data


def post(client: Any, body: bytes, headers: dict[str, str]) -> Any:
    return client.post("/webhooks/github", data=body, headers=headers)


def test_missing_signature_is_401_and_records_nothing(client: Any, db: Database) -> None:
    body = json.dumps(fix_label_payload()).encode()
    headers = signed_headers(body, "issues")
    del headers["X-Hub-Signature-256"]
    assert post(client, body, headers).status_code == 401
    assert counts(db) == EMPTY


def test_wrong_signature_is_401(client: Any, db: Database) -> None:
    body = json.dumps(fix_label_payload()).encode()
    headers = signed_headers(body, "issues")
    headers["X-Hub-Signature-256"] = "sha256=" + "0" * 64
    assert post(client, body, headers).status_code == 401
    tampered = body.replace(b"agent:fix", b"agent:fiX")
    assert post(client, tampered, signed_headers(body, "issues")).status_code == 401
    assert counts(db) == EMPTY


def test_sha1_signature_alone_is_refused(client: Any, db: Database) -> None:
    body = json.dumps(fix_label_payload()).encode()
    headers = signed_headers(body, "issues")
    del headers["X-Hub-Signature-256"]
    headers["X-Hub-Signature"] = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    assert post(client, body, headers).status_code == 401
    assert counts(db) == EMPTY


def test_signature_is_checked_before_parsing(client: Any, db: Database) -> None:
    body = b"{not json"
    headers = signed_headers(b"something else", "issues")
    assert post(client, body, headers).status_code == 401


def test_bad_json_is_400(client: Any, db: Database) -> None:
    for body in (b"{not json", b"[1, 2]", b"\xff\xfe"):
        assert post(client, body, signed_headers(body, "issues")).status_code == 400
    assert counts(db) == EMPTY


def test_json_nested_past_the_recursion_limit_is_400(client: Any, db: Database) -> None:
    body = b'{"issue": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert post(client, body, signed_headers(body, "issues")).status_code == 400
    assert counts(db) == EMPTY


def test_json_that_only_python_json_reads_is_read_as_before(client: Any, db: Database) -> None:
    """msgspec parses deliveries first; what it refuses and json reads (a lone surrogate
    escape) is read by json, so the answer names the field, as it did before msgspec."""
    data = fix_label_payload()
    data["issue"]["title"] = "\ud800 half a pair"
    body = json.dumps(data).encode()
    assert b"\\ud800" in body  # escaped, as GitHub's JSON would carry it
    response = post(client, body, signed_headers(body, "issues"))
    assert response.status_code == 400
    assert response.get_json() == {
        "error": "malformed payload: issue.title: contains a NUL character or an unpaired surrogate"
    }
    assert counts(db)["jobs"] == 0


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_only_post_is_answered_on_the_webhook_path(client: Any, db: Database, method: str) -> None:
    response = client.open("/webhooks/github", method=method)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert response.get_json() == {"error": "only POST is allowed here"}
    assert counts(db) == EMPTY


def test_other_paths_still_reach_flask(client: Any) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/webhooks/github/").status_code == 404  # Flask's 404, as JSON
    assert client.get("/no/such/page").get_json() is not None


def test_wrong_typed_fields_are_ignored_not_a_server_error(client: Any, db: Database) -> None:
    data = fix_label_payload()
    data["installation"] = "42"
    data["issue"]["number"] = "7"
    response = deliver(client, "issues", data, guid="wrong-types")
    assert response.status_code == 204
    with db.read() as s:
        delivery = s.scalar(select(Delivery).where(Delivery.guid == "wrong-types"))
        assert delivery is not None and delivery.installation_id is None
        assert delivery.outcome == "ignored: payload names no issue or pull request number"


@pytest.mark.parametrize("header", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_missing_event_or_delivery_is_400(client: Any, db: Database, header: str) -> None:
    body = json.dumps(fix_label_payload()).encode()
    headers = signed_headers(body, "issues")
    del headers[header]
    assert post(client, body, headers).status_code == 400
    assert counts(db) == EMPTY


def test_oversized_body_is_413(client: Any, db: Database, settings: Any) -> None:
    body = b'{"pad": "' + b"x" * (settings.max_body_bytes + 1) + b'"}'
    assert post(client, body, signed_headers(body, "issues")).status_code == 413
    assert counts(db) == EMPTY


def test_fix_label_records_delivery_job_and_outbox_in_one_go(client: Any, db: Database) -> None:
    response = deliver(client, "issues", fix_label_payload(), guid="guid-a")
    assert response.status_code == 202
    (job_id,) = response.get_json()["jobs"]
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None
        assert (job.kind, job.number, job.state, job.installation_id) == (
            "fix_issue",
            1,
            JobState.QUEUED,
            42,
        )
        assert s.scalar(select(Outbox.job_id)) == job_id
        delivery = s.scalar(select(Delivery).where(Delivery.guid == "guid-a"))
        assert delivery is not None and delivery.outcome == "fix_issue"
        assert job.delivery_row_id == delivery.id


def test_same_guid_twice_is_one_delivery(client: Any, db: Database) -> None:
    first = deliver(client, "issues", fix_label_payload(), guid="guid-b")
    again = deliver(client, "issues", fix_label_payload(), guid="guid-b")
    assert (first.status_code, again.status_code) == (202, 200)
    one = {"deliveries": 1, "jobs": 1, "outbox": 1, "job_triggers": 1}
    assert counts(db) | {"repo_configs": 0} == EMPTY | one


def labelled(client: Any, at: int, number: int = 1) -> Any:
    """The fix label added (again) `at` seconds from now: each labelling is a new act."""
    data = fix_label_payload(number)
    stamp = datetime.now(UTC) + timedelta(seconds=at)
    data["issue"]["updated_at"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return deliver(client, "issues", data, fresh=False).get_json()


def test_second_trigger_joins_the_live_job(client: Any, db: Database) -> None:
    first = labelled(client, 0)
    second = labelled(client, 1)
    assert second["jobs"] == first["jobs"] and second["joined"] == first["jobs"]
    other = labelled(client, 0, number=7)
    assert other["jobs"] != first["jobs"]
    assert counts(db)["jobs"] == 2 and counts(db)["outbox"] == 2
    with db.transaction() as s:  # once the first job is over, a new trigger makes a new job
        job = s.get(Job, first["jobs"][0])
        assert job is not None
        job.state, job.live_key = JobState.SUCCEEDED, None
    third = labelled(client, 2)
    assert third["jobs"] != first["jobs"]


def test_ignored_event_is_204_but_recorded(client: Any, db: Database) -> None:
    response = deliver(client, "ping", load_fixture("ping.with-app_id"), guid="guid-ping")
    assert response.status_code == 204
    with db.read() as s:
        delivery = s.scalar(select(Delivery).where(Delivery.guid == "guid-ping"))
        assert delivery is not None and delivery.outcome == "ignored: event not handled"
    assert counts(db)["jobs"] == 0


def test_check_suite_failure_makes_one_job_per_pr(client: Any, db: Database) -> None:
    data = load_fixture("check_suite.completed")
    data["check_suite"]["conclusion"] = "failure"
    pr = data["check_suite"]["pull_requests"][0]
    data["check_suite"]["pull_requests"].append({**pr, "number": 3})
    response = deliver(client, "check_suite", data)
    assert response.status_code == 202
    with db.read() as s:
        jobs = list(s.scalars(select(Job).order_by(Job.number)))
    assert [(j.kind, j.number, j.head_sha) for j in jobs] == [
        ("fix_ci", 2, data["check_suite"]["head_sha"]),
        ("fix_ci", 3, data["check_suite"]["head_sha"]),
    ]


def test_synchronize_cancels_jobs_for_the_old_head(client: Any, db: Database) -> None:
    data = load_fixture("check_suite.completed")
    data["check_suite"]["conclusion"] = "failure"
    (job_id,) = deliver(client, "check_suite", data).get_json()["jobs"]
    push = load_fixture("pull_request.synchronize")
    push["repository"] = data["repository"]
    push["number"] = push["pull_request"]["number"] = 2
    push["pull_request"]["head"]["sha"] = "f" * 40
    response = deliver(client, "pull_request", push)
    assert response.status_code == 202 and response.get_json()["cancelled"] == [job_id]
    with db.read() as s:
        job = s.get(Job, job_id)
        assert job is not None and (job.state, job.live_key) == (JobState.CANCELLED, None)


def test_installation_events_keep_the_installation_table(client: Any, db: Database) -> None:
    assert deliver(client, "installation", load_fixture("installation.created")).status_code == 202
    with db.read() as s:
        row = s.get(Installation, 957387)
        assert row is not None and row.account_login == "Codertocat" and row.deleted_at is None
        assert row.repositories
    deleted = load_fixture("installation.deleted")
    deleted["installation"]["id"] = 957387
    deliver(client, "installation", deleted)
    with db.read() as s:
        row = s.get(Installation, 957387)
        assert row is not None and row.deleted_at is not None


@pytest.mark.parametrize("fixture", fixture_names())
def test_every_fixture_signed_gets_an_answer_below_500(
    client: Any, db: Database, fixture: str
) -> None:
    response = deliver(client, event_name(fixture), load_fixture(fixture))
    assert response.status_code in (200, 202, 204)
    assert counts(db)["deliveries"] == 1


def test_health_routes(client: Any) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").get_json() == {"status": "ok"}
    deliver(client, "issues", fix_label_payload())
    text = client.get("/metrics").get_data(as_text=True)
    assert 'onloop_deliveries_total{event="issues",outcome="202"} 1.0' in text
    assert 'onloop_jobs{kind="fix_issue",state="queued"} 1.0' in text
