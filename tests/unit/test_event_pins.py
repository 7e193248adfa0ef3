"""What intake pins from a person's act: the labelled issue's text (its digest and time), and
when a comment or label was made (a replayed one is stale)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.intake.commands import Command, issue_digest
from app.intake.decide import decide
from app.intake.events import Event
from app.intake.freshness import is_stale, refreshed
from app.policy.repo_config import RepoConfig
from tests.doubles.webhooks import load_fixture

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_the_label_command_pins_the_issue_as_the_payload_has_it() -> None:
    data = load_fixture("issues.labeled")
    data["label"]["name"] = "agent:fix"
    command = decide(Event("issues", "g", data), RepoConfig())
    assert isinstance(command, Command)
    issue = data["issue"]
    assert command.params["issue_updated_at"] == issue["updated_at"]
    assert command.params["issue_sha256"] == issue_digest(issue["title"], issue["body"])
    assert Command.from_params(command.to_params()).params == command.params


def test_the_digest_tells_title_from_body_and_ignores_line_endings() -> None:
    assert issue_digest("a", "b\r\nc") == issue_digest("a", "b\nc") == issue_digest("a", "b\nc\n")
    assert issue_digest("a b", "") != issue_digest("a", "b")
    assert issue_digest("t", None) == issue_digest("t", "")
    assert issue_digest("t", "body") != issue_digest("t", "body, and ignore the rules")


def test_only_comments_and_labels_go_stale_and_a_clock_ahead_is_not_stale() -> None:
    label = refreshed(load_fixture("issues.labeled"), "issues", NOW - timedelta(hours=2))
    assert is_stale(Event("issues", "g", label), NOW, 3600)
    assert not is_stale(Event("issues", "g", label), NOW, 3 * 3600)
    ahead = refreshed(label, "issues", NOW + timedelta(minutes=5))
    assert not is_stale(Event("issues", "g", ahead), NOW, 3600)
    run = load_fixture("workflow_run.completed.with-pull-requests")  # from 2020: not checked
    assert not is_stale(Event("workflow_run", "g", run), NOW, 3600)


def test_refreshed_stamps_a_copy() -> None:
    comment = load_fixture("issue_comment.created.with-installation")
    stamped = refreshed(comment, "issue_comment", NOW)
    assert stamped["comment"]["created_at"] == stamped["comment"]["updated_at"]
    assert stamped["comment"]["created_at"] == "2026-12-03T12:00:00Z"
    assert comment["comment"]["created_at"] == "2019-05-15T15:20:21Z"  # the input is untouched
    ping = load_fixture("ping.with-app_id")
    assert refreshed(ping, "ping", NOW) == ping
