"""What the intake records for /insights from `pull_request` and `push` deliveries: each
delivery once, a rebased copy of a person's commit once, a branch reused by a later pull
request starting from no rework, reverts only of onloop's commits on the default branch."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient
from sqlalchemy import select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import BranchCommit, OnloopPull
from app.web import create_app
from tests.doubles.webhooks import deliver, load_fixture

REPO = "acme/widgets"


def pull(
    number: int,
    action: str,
    branch: str,
    merged: bool = False,
    sha: str = "b" * 40,
    head_repo: str = REPO,
) -> Any:
    payload = load_fixture("pull_request.opened")
    payload.update(action=action, number=number)
    payload["repository"].update(full_name=REPO, default_branch="main")
    body = payload["pull_request"]
    body.update(number=number, merged=merged, state="closed" if action == "closed" else "open")
    if action == "closed":
        body.update(closed_at="2026-12-04T10:00:00Z", merged_at="2026-12-04T10:00:00Z")
        body["merge_commit_sha"] = sha if merged else None
    body["head"].update(ref=branch, sha="c" * 40)
    body["head"]["repo"]["full_name"] = head_repo
    return payload


def push(ref: str, *commits: tuple[str, str]) -> Any:
    payload = load_fixture("pull_request.opened")
    return {
        "ref": ref,
        "commits": [{"id": sha, "message": message, "distinct": True} for sha, message in commits],
        "repository": {**payload["repository"], "full_name": REPO, "default_branch": "main"},
        "installation": payload["installation"],
        "sender": payload["sender"],
    }


def send(client: FlaskClient, event: str, payload: Any, guid: str | None = None) -> None:
    answer = deliver(client, event, payload, guid)
    assert answer.status_code < 300, answer.get_data(as_text=True)


def pulls(db: Database) -> dict[int, OnloopPull]:
    with db.read() as s:
        return {p.number: p for p in s.scalars(select(OnloopPull))}


def test_rework_counts_each_commit_once_and_a_reused_branch_starts_again(
    settings: Settings, db: Database
) -> None:
    client = create_app(settings, db=db).test_client()
    branch = "refs/heads/onloop/issue-4"
    send(client, "push", push(branch, ("1" * 40, "Fix\n\nOnloop-Job: 12\n")))
    send(client, "push", push(branch, ("2" * 40, "Rename the flag")), guid="same-guid")
    send(client, "push", push(branch, ("2" * 40, "Rename the flag")), guid="same-guid")
    send(client, "push", push(branch, ("3" * 40, "Rename the flag")))  # its rebased copy
    send(client, "push", push("refs/heads/feature", ("4" * 40, "not onloop's branch")))
    send(client, "pull_request", pull(5, "opened", "onloop/issue-4"))
    send(client, "pull_request", pull(5, "closed", "onloop/issue-4", merged=True))
    send(client, "pull_request", pull(6, "closed", "onloop/issue-4"))  # the branch reused
    send(client, "pull_request", pull(7, "closed", "someone/else", merged=True))
    fork = pull(8, "closed", "onloop/issue-4", merged=True, head_repo="mallory/widgets")
    send(client, "pull_request", fork)
    found = pulls(db)
    assert set(found) == {5, 6}  # not someone else's branch, nor a fork's `onloop/...`
    assert found[5].merged and found[5].rework_commits == 1 and found[5].opened_at is not None
    assert not found[6].merged and found[6].rework_commits == 0
    with db.read() as s:
        jobs = {c.sha: c.job_id for c in s.scalars(select(BranchCommit))}
    assert jobs == {"1" * 40: 12, "2" * 40: None}


def test_only_a_revert_of_onloop_s_merged_commit_on_the_default_branch_counts(
    settings: Settings, db: Database
) -> None:
    client = create_app(settings, db=db).test_client()
    merged = "a" * 40
    send(client, "pull_request", pull(5, "closed", "onloop/issue-4", merged=True, sha=merged))
    send(client, "pull_request", pull(6, "closed", "onloop/issue-5", merged=False, sha="d" * 40))
    says = f"This reverts commit {merged}."
    send(client, "push", push("refs/heads/feature", ("5" * 40, says)))  # not the default branch
    send(client, "push", push("refs/heads/main", ("6" * 40, f"This reverts commit {'e' * 40}.")))
    assert pulls(db)[5].reverted_at is None
    send(client, "push", push("refs/heads/main", ("7" * 40, says), ("8" * 40, says)))
    found = pulls(db)
    assert found[5].reverted_at is not None and found[5].revert_sha == "7" * 40
    assert found[6].reverted_at is None
