"""decide() on real payloads: which events become which commands, and why others are ignored."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.kinds import Kind
from app.intake.commands import CancelStale, Command, InstallationChange
from app.intake.decide import Ignored, decide, explain, parse_command
from app.intake.events import Event
from app.policy.repo_config import RepoConfig
from tests.doubles.webhooks import event_name, fixture_names, load_fixture

CONFIG = RepoConfig()


def event(name: str, data: dict[str, Any]) -> Event:
    return Event(name=name, delivery_guid="guid-1", data=data)


def labeled(label: str = "agent:fix") -> dict[str, Any]:
    data = load_fixture("issues.labeled")
    data["label"]["name"] = label
    return data


def pr_comment(body: str, sender_type: str = "User") -> dict[str, Any]:
    data = load_fixture("issue_comment.created.with-installation")
    data["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1"}
    data["comment"]["body"] = body
    data["comment"]["user"]["type"] = sender_type
    data["sender"]["type"] = sender_type
    return data


def test_fix_label_on_issue_is_fix_issue() -> None:
    data = labeled()
    command = decide(event("issues", data), CONFIG)
    assert isinstance(command, Command)
    assert command.kind == Kind.FIX_ISSUE
    assert command.numbers == (data["issue"]["number"],)
    assert command.requested_by == data["sender"]["login"]
    assert command.repo == data["repository"]["full_name"]


def test_other_label_and_configured_label() -> None:
    assert explain(event("issues", labeled("bug")), CONFIG) == Ignored.OTHER_LABEL
    custom = RepoConfig(fix_label="bot please")
    assert isinstance(decide(event("issues", labeled("bot please")), custom), Command)
    assert decide(event("issues", labeled("agent:fix")), custom) is None


def test_fix_label_on_pull_request_is_ignored() -> None:
    data = labeled()
    data["issue"]["pull_request"] = {"url": "x"}
    assert explain(event("issues", data), CONFIG) == Ignored.PULL_REQUEST_LABEL


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ("/agent rebase", Kind.REBASE_PR),
        ("/agent fix", Kind.FIX_CI),
        ("/agent review please", Kind.REVIEW_PR),
        ("/agent help", Kind.HELP),
        ("/agent cancel", Kind.CANCEL),
        ("/agent status", Kind.STATUS),
        ("/AGENT Rebase\nmore text", Kind.REBASE_PR),
        ("/agent", Kind.HELP),
    ],
)
def test_slash_commands_on_pr(body: str, kind: str) -> None:
    command = decide(event("issue_comment", pr_comment(body)), CONFIG)
    assert isinstance(command, Command)
    assert command.kind == kind
    assert command.comment_id is not None


def test_unknown_verb_answers_with_help() -> None:
    command = decide(event("issue_comment", pr_comment("/agent dance")), CONFIG)
    assert isinstance(command, Command)
    assert command.kind == Kind.HELP
    assert command.params["unknown_verb"] == "dance"


def test_verb_the_repo_does_not_allow_answers_with_help() -> None:
    config = RepoConfig(commands=["review"])
    command = decide(event("issue_comment", pr_comment("/agent rebase")), config)
    assert isinstance(command, Command)
    assert (command.kind, command.params["refused_verb"]) == (Kind.HELP, "rebase")


def test_comment_ignores() -> None:
    assert explain(event("issue_comment", pr_comment("thanks!")), CONFIG) == Ignored.NOT_A_COMMAND
    assert explain(event("issue_comment", pr_comment("see /agent rebase")), CONFIG) == (
        Ignored.NOT_A_COMMAND
    )
    on_issue = load_fixture("issue_comment.created")
    on_issue["comment"]["body"] = "/agent rebase"
    assert explain(event("issue_comment", on_issue), CONFIG) == Ignored.NOT_ON_PR
    bot = pr_comment("/agent rebase", sender_type="Bot")
    assert explain(event("issue_comment", bot), CONFIG) == Ignored.BOT_SENDER
    own = pr_comment("/agent rebase")
    own["sender"]["login"] = own["comment"]["user"]["login"] = "onloop[bot]"
    assert explain(event("issue_comment", own), CONFIG) == Ignored.BOT_SENDER
    edited = pr_comment("/agent rebase")
    edited["action"] = "edited"
    assert explain(event("issue_comment", edited), CONFIG) == Ignored.UNROUTED


def failed(name: str, fixture: str) -> dict[str, Any]:
    data = load_fixture(fixture)
    data[name]["conclusion"] = "failure"
    return data


def test_check_suite_failure_is_fix_ci_for_the_matching_pr() -> None:
    data = failed("check_suite", "check_suite.completed")
    command = decide(event("check_suite", data), CONFIG)
    assert isinstance(command, Command)
    assert command.kind == Kind.FIX_CI
    assert command.numbers == (2,)
    assert command.head_sha == data["check_suite"]["head_sha"]
    assert command.params["automatic"] is True


def test_success_is_ignored_and_auto_fix_can_be_off() -> None:
    data = load_fixture("check_suite.completed")
    assert explain(event("check_suite", data), CONFIG) == Ignored.NOT_FAILURE
    red = failed("check_suite", "check_suite.completed")
    assert explain(event("check_suite", red), RepoConfig(auto_fix_ci=False)) == (
        Ignored.AUTO_FIX_OFF
    )


def test_workflow_run_whose_prs_moved_on_is_ignored() -> None:
    # In this payload the run's head_sha differs from the listed PR's head sha.
    data = failed("workflow_run", "workflow_run.completed.with-pull-requests")
    assert explain(event("workflow_run", data), CONFIG) == Ignored.NO_MATCHING_PR
    run = data["workflow_run"]
    run["pull_requests"][0]["head"]["sha"] = run["head_sha"]
    assert explain(event("workflow_run", data), CONFIG) == Ignored.NO_MATCHING_PR  # other repo
    run["pull_requests"][0]["head"]["repo"]["id"] = run["head_repository"]["id"]
    command = decide(event("workflow_run", data), CONFIG)
    assert isinstance(command, Command) and command.numbers == (2,)


def test_workflow_run_from_a_fork_has_no_prs_and_is_found_by_sha() -> None:
    data = failed("workflow_run", "workflow_run.completed")
    data["workflow_run"]["head_repository"]["id"] = 999
    command = decide(event("workflow_run", data), CONFIG)
    assert isinstance(command, Command)
    assert command.numbers == ()
    assert command.params["find_prs"] is True
    assert command.params["default_branch"] is False


def test_red_default_branch_without_pr() -> None:
    data = failed("workflow_run", "workflow_run.completed")
    data["workflow_run"]["head_branch"] = data["repository"]["default_branch"]
    command = decide(event("workflow_run", data), CONFIG)
    assert isinstance(command, Command)
    assert (command.numbers, command.params["default_branch"]) == ((), True)


def test_pr_pushed_or_closed_cancels_stale_jobs() -> None:
    data = load_fixture("pull_request.synchronize")
    change = decide(event("pull_request", data), CONFIG)
    assert change == CancelStale(
        repo=data["repository"]["full_name"],
        number=data["number"],
        head_sha=data["pull_request"]["head"]["sha"],
        reason="pull request synchronize",
    )
    data["action"] = "closed"
    closed = decide(event("pull_request", data), CONFIG)
    assert isinstance(closed, CancelStale) and closed.head_sha is None
    opened = load_fixture("pull_request.opened")
    assert explain(event("pull_request", opened), CONFIG) == Ignored.UNROUTED


def test_installation_events() -> None:
    created = decide(event("installation", load_fixture("installation.created")), CONFIG)
    assert isinstance(created, InstallationChange)
    assert created.action == "created" and created.installation_id == 957387
    assert created.repositories
    deleted = decide(event("installation", load_fixture("installation.deleted")), CONFIG)
    assert isinstance(deleted, InstallationChange) and deleted.action == "deleted"


def test_unrouted_and_unlabeled() -> None:
    assert explain(event("ping", load_fixture("ping.with-app_id")), CONFIG) == Ignored.UNROUTED
    assert explain(event("issues", load_fixture("issues.unlabeled")), CONFIG) == Ignored.UNROUTED


@pytest.mark.parametrize("fixture", fixture_names())
def test_every_fixture_decides_without_error(fixture: str) -> None:
    result = explain(event(event_name(fixture), load_fixture(fixture)), CONFIG)
    assert isinstance(result, Command | CancelStale | InstallationChange) or result in Ignored


def test_parse_command() -> None:
    assert parse_command("/agent rebase now") == ("rebase", "now")
    assert parse_command("  \n/agent fix") == ("fix", "")
    assert parse_command("please /agent fix") is None
    assert parse_command("") is None


def test_onloops_own_check_suite_is_ignored() -> None:
    data = load_fixture("check_suite.completed")
    data["check_suite"]["conclusion"] = "failure"
    data["check_suite"]["app"]["id"] = 4242
    event = Event("check_suite", "guid-own", data)
    assert explain(event, RepoConfig(), own_app_id=4242) == Ignored.OWN_CHECKS
    assert explain(event, RepoConfig(), own_app_id=7) != Ignored.OWN_CHECKS
