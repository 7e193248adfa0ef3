"""A Command survives the trip through a job's stored params; a pull request's head, typed."""

from __future__ import annotations

import json
from typing import Any

from app.intake.commands import Command
from app.intake.decide import decide
from app.intake.events import Event
from app.policy.repo_config import RepoConfig
from tasks.blueprints.pulls import PullRef
from tests.doubles.webhooks import load_fixture


def stored(command: Command) -> dict[str, Any]:
    """What the worker reads back: the JSON intake wrote to `jobs.params`."""
    loaded: dict[str, Any] = json.loads(json.dumps(command.to_params()))
    return loaded


def commands() -> list[Command]:
    """What decide() makes of real deliveries: a label, PR comments, failing runs."""
    comment = load_fixture("issue_comment.created.with-installation")
    comment["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    labeled = load_fixture("issues.labeled")
    labeled["label"]["name"] = "agent:fix"
    events = [("issues", labeled)]
    for body in ("/agent rebase", "/agent dance now"):
        comment["comment"]["body"] = body
        events.append(("issue_comment", json.loads(json.dumps(comment))))
    for name in ("check_suite", "workflow_run"):
        run = load_fixture(f"{name}.completed")
        run[name]["conclusion"] = "failure"
        events.append((name, run))
    made = [decide(Event(name, "guid-1", data), RepoConfig()) for name, data in events]
    return [c for c in made if isinstance(c, Command)]


def test_what_decide_makes_comes_back_the_same() -> None:
    made = commands()
    assert {c.kind for c in made} == {"fix_issue", "rebase_pr", "help", "fix_ci"}
    for command in made:
        assert Command.from_params(stored(command)) == command


def test_a_fix_ci_command_keeps_its_numbers_and_params() -> None:
    command = Command(
        kind="fix_ci",
        repo="o/r",
        requested_by="github-actions",
        numbers=(2, 5),
        head_sha="abc",
        params={"automatic": True, "run_kind": "check_suite", "run_id": 9, "find_prs": False},
    )
    back = Command.from_params({**stored(command), "authorization_expired": True})
    assert back == command and back.numbers == (2, 5) and back.params["run_id"] == 9


def test_missing_or_odd_keys_take_the_defaults() -> None:
    back = Command.from_params({"comment_id": 12, "requested_by_id": True, "params": "x"})
    assert back == Command(kind="", repo="", requested_by="", comment_id=12)
    assert Command.from_params({}).params == {}


def pull(head_repo: str | None, maintainer_can_modify: bool = False) -> PullRef:
    url = f"https://github.com/{head_repo}.git" if head_repo else None
    return PullRef(7, "o/r", head_repo, url, "topic", "abc", maintainer_can_modify)


def test_a_pull_request_head_here_or_in_a_fork() -> None:
    here, fork = pull("o/r"), pull("someone/r")
    assert not here.fork and here.can_push_to_head and here.fetch_refs == []
    assert fork.fork and not fork.can_push_to_head and fork.fetch_refs == ["refs/pull/7/head"]
    assert pull("someone/r", maintainer_can_modify=True).can_push_to_head
    gone = pull(None, maintainer_can_modify=True)  # the fork was deleted
    assert gone.fork and not gone.can_push_to_head and gone.pull_ref == "refs/pull/7/head"
