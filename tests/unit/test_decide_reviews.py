"""decide() on reviews and review-thread comments: which become follow-ups, and why others not."""

from __future__ import annotations

from typing import Any

from app.core.kinds import Kind
from app.intake.commands import Command
from app.intake.decide import Ignored, explain
from app.intake.events import Event
from app.policy.repo_config import RepoConfig

CONFIG = RepoConfig()
REVIEWER = {"login": "rita", "id": 7, "type": "User"}


def _pull(ref: str = "onloop/issue-3", state: str = "open") -> dict[str, Any]:
    return {"number": 12, "state": state, "head": {"sha": "a" * 40, "ref": ref}}


def review(state: str = "commented", association: str = "MEMBER", **extra: Any) -> dict[str, Any]:
    body = {
        "action": "submitted",
        "review": {
            "id": 88,
            "user": dict(REVIEWER),
            "body": "Looks close",
            "state": state,
            "commit_id": "a" * 40,
            "author_association": association,
            "submitted_at": "2026-12-04T10:00:00Z",
        },
        "pull_request": _pull(),
        "repository": {"id": 5, "full_name": "octo/widgets", "default_branch": "main"},
        "installation": {"id": 9},
        "sender": dict(REVIEWER),
    }
    body.update(extra)
    return body


def thread_comment(text: str, reply_to: int | None = 41) -> dict[str, Any]:
    data = review()
    del data["review"]
    data["action"] = "created"
    data["comment"] = {"id": 42, "body": text, "user": dict(REVIEWER), "in_reply_to_id": reply_to}
    if reply_to is None:
        del data["comment"]["in_reply_to_id"]
    return data


def test_a_commenting_or_changes_requested_review_is_a_follow_up() -> None:
    for state in ("commented", "changes_requested"):
        command = explain(Event("pull_request_review", "g", review(state)), CONFIG)
        assert isinstance(command, Command)
        assert command.kind == Kind.ADDRESS_REVIEW
        assert command.numbers == (12,)
        assert command.requested_by == "rita"
        assert command.params["review_id"] == 88
        assert command.params["implicit"] is True
        assert command.head_sha == "a" * 40
        assert command.trigger == "review:5:88"


def test_approvals_bots_outsiders_closed_prs_and_repos_without_fix_start_nothing() -> None:
    def said(data: dict[str, Any], config: RepoConfig = CONFIG) -> object:
        return explain(Event("pull_request_review", "g", data), config)

    assert said(review("approved")) == Ignored.NOT_A_REQUEST
    assert said(review("dismissed")) == Ignored.NOT_A_REQUEST
    bot = review()
    bot["sender"] = bot["review"]["user"] = {"login": "onloop[bot]", "id": 1, "type": "Bot"}
    assert said(bot) == Ignored.BOT_SENDER
    assert said(review(association="NONE")) == Ignored.OUTSIDER_REVIEW
    assert said(review(association="CONTRIBUTOR")) == Ignored.OUTSIDER_REVIEW
    readers = RepoConfig(trigger_permission="read")  # readers may: the worker checks roles
    assert isinstance(said(review(association="NONE"), readers), Command)
    closed = review(pull_request=_pull(state="closed"))
    assert said(closed) == Ignored.CLOSED
    assert said(review(), RepoConfig(commands=["review"])) == Ignored.REVIEWS_OFF


def test_agent_replies_in_a_thread_follow_up_and_apply_anywhere_applies() -> None:
    def said(data: dict[str, Any]) -> object:
        return explain(Event("pull_request_review_comment", "g", data), CONFIG)

    reply = said(thread_comment("/agent please use a constant"))
    assert isinstance(reply, Command) and reply.kind == Kind.ADDRESS_REVIEW
    assert reply.trigger == "review-comment:5:42"
    applied = said(thread_comment("/agent apply", reply_to=None))
    assert isinstance(applied, Command) and applied.kind == Kind.APPLY_SUGGESTIONS
    assert said(thread_comment("/agent fix this", reply_to=None)) == Ignored.IN_REVIEW
    assert said(thread_comment("thanks!")) == Ignored.NOT_A_COMMAND
