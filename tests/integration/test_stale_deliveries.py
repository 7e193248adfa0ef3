"""A comment or label delivery older than ONLOOP_MAX_EVENT_AGE (a replayed body under a fresh
GUID) is answered 204 and recorded, and makes no job; a fresh one still does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from werkzeug.serving import make_server

from app.cli.main import main
from app.core.settings import Settings
from app.intake.decide import Ignored
from app.store.db import Database
from app.store.models import Delivery, Job
from app.web import create_app
from tasks.queue.redeliver import note_request
from tests.doubles.webhooks import SECRET, deliver, load_fixture


def ago(seconds: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def label(updated_at: str | None) -> dict[str, Any]:
    """issues.labeled with the fix label; GitHub sets the issue's `updated_at` at labelling."""
    data = load_fixture("issues.labeled.with-organization")
    data["label"]["name"] = "agent:fix"
    data["installation"] = {"id": 42}
    if updated_at is None:
        del data["issue"]["updated_at"]
    else:
        data["issue"]["updated_at"] = updated_at
    return data


def command(created_at: str) -> dict[str, Any]:
    """`/agent rebase` on a pull request, the comment made at `created_at`."""
    data = load_fixture("issue_comment.created.with-installation")
    data["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    data["comment"].update(body="/agent rebase", created_at=created_at, updated_at=created_at)
    return data


def outcome(db: Database, guid: str) -> str | None:
    with db.read() as s:
        return s.scalar(select(Delivery.outcome).where(Delivery.guid == guid))


def jobs(db: Database) -> int:
    with db.read() as s:
        return len(s.scalars(select(Job.id)).all())


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        ("issues", label(ago(2 * 3600))),
        ("issue_comment", command(ago(2 * 3600))),
        ("issues", label("2019-05-15T15:20:18Z")),  # the fixture as recorded, years ago
        ("issues", label(None)),  # GitHub always dates the act: undated is not GitHub's body
        ("issues", label("not a time")),
    ],
)
def test_old_or_undated_comment_or_label_makes_no_job(
    client: Any, db: Database, event: str, payload: dict[str, Any]
) -> None:
    response = deliver(client, event, payload, guid="replayed", fresh=False)
    assert response.status_code == 204
    assert outcome(db, "replayed") == Ignored.STALE_EVENT
    assert jobs(db) == 0


@pytest.mark.parametrize(
    ("event", "payload"),
    [("issues", label(ago(30 * 60))), ("issue_comment", command(ago(30 * 60)))],
)
def test_one_within_the_age_still_makes_its_job(
    client: Any, db: Database, event: str, payload: dict[str, Any]
) -> None:
    response = deliver(client, event, payload, guid="recent", fresh=False)
    assert response.status_code == 202, response.get_data(as_text=True)
    assert len(response.get_json()["jobs"]) == 1 and jobs(db) == 1


def test_the_age_is_the_operators_setting(settings: Settings, db: Database) -> None:
    hours = settings.model_copy(update={"max_event_age": 3 * 3600})
    client = create_app(hours, db=db).test_client()
    assert deliver(client, "issues", label(ago(2 * 3600)), fresh=False).status_code == 202
    assert deliver(client, "issues", label(ago(4 * 3600)), fresh=False).status_code == 204
    assert Settings(_env_file=None).max_event_age == 3600  # type: ignore[call-arg]


def test_ignored_events_keep_their_own_reason(client: Any, db: Database) -> None:
    """Only deliveries that would start work are checked: an old comment that is no command is
    still "not a command"."""
    old = command(ago(2 * 3600))
    old["comment"]["body"] = "thanks!"
    assert deliver(client, "issue_comment", old, guid="chat", fresh=False).status_code == 204
    assert outcome(db, "chat") == Ignored.NOT_A_COMMAND


@pytest.fixture
def web_url(settings: Settings, db: Database) -> Iterator[str]:
    """The Flask app on a real local HTTP server, for `onloop replay`."""
    server = make_server("127.0.0.1", 0, create_app(settings, db=db), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/webhooks/github"
    server.shutdown()
    thread.join(10)


def test_replay_sends_the_file_as_is_and_fresh_stamps_now(
    web_url: str, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    recorded = tmp_path / "labeled.json"
    recorded.write_text(json.dumps(label("2019-05-15T15:20:18Z")))
    runner = CliRunner(env={"ONLOOP_WEBHOOK_SECRET": SECRET})
    command = ["replay", str(recorded), "--event", "issues", "--url", web_url, "--delivery"]
    # The answer is the last line (the server, in this process, logs to the same stdout).
    as_is = runner.invoke(main, [*command, "old"])
    assert as_is.exit_code == 0 and as_is.output.splitlines()[-1].startswith("204")
    assert outcome(db, "old") == Ignored.STALE_EVENT and jobs(db) == 0
    fresh = runner.invoke(main, [*command, "fresh", "--fresh"])
    assert fresh.exit_code == 0 and fresh.output.splitlines()[-1].startswith("202")
    assert outcome(db, "fresh") == "fix_issue" and jobs(db) == 1
    assert "ONLOOP_MAX_EVENT_AGE" in runner.invoke(main, ["replay", "--help"]).output


def test_a_redelivery_onloop_asked_for_passes_but_its_body_under_a_new_guid_does_not(
    client: Any, db: Database
) -> None:
    """After an outage the sweep asks GitHub again for what it missed; GitHub resends the old
    body under the same GUID, so that GUID (and only it) passes the age check."""
    note_request(db, "missed-in-outage")
    old = label(ago(2 * 3600))
    assert deliver(client, "issues", old, guid="missed-in-outage", fresh=False).status_code == 202
    assert outcome(db, "missed-in-outage") == "fix_issue" and jobs(db) == 1
    again = label(ago(2 * 3600))
    assert deliver(client, "issues", again, guid="captured-copy", fresh=False).status_code == 204
    assert outcome(db, "captured-copy") == Ignored.STALE_EVENT and jobs(db) == 1
