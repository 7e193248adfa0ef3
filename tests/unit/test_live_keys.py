"""Which requests join a live job: a person's own repeat and an automatic CI fix's other
failed runs, never another person's command (issue 15, item 5)."""

from __future__ import annotations

import json
from typing import Any

from app.intake.commands import Command
from app.intake.decide import decide
from app.intake.events import Event
from app.policy.repo_config import RepoConfig
from tests.doubles.webhooks import load_fixture


def key(name: str, data: dict[str, Any]) -> str:
    command = decide(Event(name, "guid-1", data), RepoConfig())
    assert isinstance(command, Command), command
    (number,) = command.numbers or (None,)
    return command.live_key(number)


def comment(body: str, login: str, user_id: int | None) -> dict[str, Any]:
    data: dict[str, Any] = load_fixture("issue_comment.created.with-installation")
    data["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    data["comment"]["body"] = body
    data["sender"] = {"login": login, "id": user_id, "type": "User"}
    return json.loads(json.dumps(data))


def test_two_peoples_identical_commands_have_two_keys_and_a_repeat_one() -> None:
    maintainer = key("issue_comment", comment("/agent rebase", "alice", 1))
    assert key("issue_comment", comment("/agent rebase", "alice", 1)) == maintainer
    assert key("issue_comment", comment("/agent rebase", "bob", 2)) != maintainer
    # a renamed login is the same person; without an id, the login decides
    assert key("issue_comment", comment("/agent rebase", "alice-renamed", 1)) == maintainer
    no_id = key("issue_comment", comment("/agent rebase", "Carol", None))
    assert no_id == key("issue_comment", comment("/agent rebase", "carol", None)) != maintainer
    # a login that is all digits is not taken for another person's id
    assert key("issue_comment", comment("/agent rebase", "1", None)) != maintainer


def test_an_automatic_ci_fix_is_one_job_per_head_whoever_sent_the_run() -> None:
    suite = load_fixture("check_suite.completed")
    suite["check_suite"]["conclusion"] = "failure"
    other = json.loads(json.dumps(suite))
    other["sender"] = {"login": "someone-else", "id": 777, "type": "User"}
    assert key("check_suite", suite) == key("check_suite", other)
    assert "by-" not in key("check_suite", suite)
