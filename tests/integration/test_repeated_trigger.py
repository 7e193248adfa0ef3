"""A comment or label delivered again under new GUIDs (a second hook, a replayed body) starts
work once: later deliveries are recorded and answered like duplicates, even after the first
job has finished and freed its live key."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update

from app.intake.decide import Ignored
from app.store.db import Database
from app.store.models import Delivery, Job, JobState, JobTrigger, Outbox
from tests.doubles.webhooks import deliver, load_fixture


def comment(body: str = "/agent rebase", comment_id: int = 555) -> dict[str, Any]:
    data = load_fixture("issue_comment.created.with-installation")
    data["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    data["comment"].update(body=body, id=comment_id)
    return data


def label(labelled_at: str) -> dict[str, Any]:
    data = load_fixture("issues.labeled.with-organization")
    data["label"]["name"] = "agent:fix"
    data["installation"] = {"id": 42}
    data["issue"]["updated_at"] = labelled_at
    return data


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def count(db: Database, model: Any) -> int:
    with db.read() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def finish_all(db: Database) -> None:
    """The jobs end, which frees their live keys (what let a repeat start a second job)."""
    with db.transaction() as s:
        s.execute(update(Job).values(state=JobState.SUCCEEDED, live_key=None))


def test_one_comment_under_five_guids_is_one_job(client: Any, db: Database) -> None:
    answers = [deliver(client, "issue_comment", comment()) for _ in range(5)]
    assert [a.status_code for a in answers] == [202, 200, 200, 200, 200]
    assert all(a.json["outcome"] == Ignored.REPEATED_TRIGGER for a in answers[1:])
    assert count(db, Job) == 1 and count(db, Outbox) == 1
    assert count(db, Delivery) == 5  # every delivery is recorded, with why it did nothing
    with db.read() as s:
        outcomes = s.scalars(select(Delivery.outcome).order_by(Delivery.id)).all()
    assert outcomes[1:] == [Ignored.REPEATED_TRIGGER] * 4


def test_a_repeat_after_the_job_finished_starts_nothing(client: Any, db: Database) -> None:
    for comment_id, body in ((1, "/agent rebase"), (2, "/agent help")):  # work, and a reply
        data = comment(body, comment_id)
        assert deliver(client, "issue_comment", data).status_code == 202
        finish_all(db)
        again = deliver(client, "issue_comment", data)
        assert (again.status_code, again.json["outcome"]) == (200, Ignored.REPEATED_TRIGGER)
    assert count(db, Job) == 2 and count(db, JobTrigger) == 2


def test_another_comment_with_the_same_text_is_new_work(client: Any, db: Database) -> None:
    assert deliver(client, "issue_comment", comment(comment_id=1)).status_code == 202
    finish_all(db)
    assert deliver(client, "issue_comment", comment(comment_id=2)).status_code == 202
    assert count(db, Job) == 2


def test_concurrent_deliveries_of_one_comment_make_one_job(client: Any, db: Database) -> None:
    data = comment()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: deliver(client, "issue_comment", data), range(8)))
    assert sorted(a.status_code for a in answers) == [200] * 7 + [202]
    assert count(db, Job) == 1 and count(db, Delivery) == 8


def test_a_label_starts_work_once_and_a_new_labelling_again(client: Any, db: Database) -> None:
    labelled = label(now())
    first = deliver(client, "issues", labelled, fresh=False)
    assert first.status_code == 202
    finish_all(db)
    again = deliver(client, "issues", labelled, fresh=False)
    assert (again.status_code, again.json["outcome"]) == (200, Ignored.REPEATED_TRIGGER)
    assert count(db, Job) == 1
    relabelled = label("2999-01-01T00:00:00Z")  # removed and added again: a later time
    assert deliver(client, "issues", relabelled, fresh=False).status_code == 202
    assert count(db, Job) == 2
