"""onloop's pull requests in the GitHub double and the deliveries GitHub would send about
them (push, pull_request opened/closed, a revert pushed to the default branch), for /insights
tests: through the Flask test client or over HTTP to a running onloop (`send`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import requests

from app.store.models import utcnow
from tests.doubles.github import gitrepo
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.model import Issue
from tests.doubles.webhooks import deliver, load_fixture, signed_headers

Send = Callable[[str, Any], None]  # (event name, payload): delivered, or the test fails


def via_client(client: Any) -> Send:
    """Deliver through a Flask test client."""

    def send(event: str, payload: Any) -> None:
        answer = deliver(client, event, payload)
        assert answer.status_code < 300, answer.get_data(as_text=True)

    return send


def via_http(base_url: str) -> Send:
    """Deliver to a running onloop at `base_url` (a browser test's server)."""

    def send(event: str, payload: Any) -> None:
        body = json.dumps(payload).encode()
        answer = requests.post(
            base_url + "/webhooks/github",
            data=body,
            headers=signed_headers(body, event),
            timeout=10,
        )
        assert answer.status_code < 300, answer.text

    return send


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pull_payload(repo: str, pull: Issue, action: str, merge_sha: str | None = None) -> Any:
    """A `pull_request` delivery for the double's pull request, as GitHub sends it."""
    assert pull.pull is not None
    payload = load_fixture("pull_request.opened")
    payload.update(action=action, number=pull.number)
    payload["repository"].update(full_name=repo, default_branch="main")
    body = payload["pull_request"]
    now = iso(utcnow())
    body.update(number=pull.number, state=pull.state, merged=pull.pull.merged, created_at=now)
    if pull.state == "closed":
        body.update(closed_at=now, merged_at=now if pull.pull.merged else None)
        body["merge_commit_sha"] = merge_sha
    body["head"].update(ref=pull.pull.head_ref, sha=pull.pull.head_sha)
    body["head"]["repo"]["full_name"] = repo
    return payload


def push_payload(double: GitHubDouble, repo: str, branch: str, shas: list[str]) -> Any:
    """A `push` delivery of `shas` (oldest first) to `branch`, messages read from git."""
    payload = load_fixture("pull_request.opened")
    commits = []
    for sha in shas:
        message = str(gitrepo.commit_info(double.git_dir(repo), sha)["message"])
        commits.append(
            {"id": sha, "message": message, "timestamp": iso(utcnow()), "distinct": True}
        )
    return {
        "ref": f"refs/heads/{branch}",
        "before": "0" * 40,
        "after": shas[-1],
        "commits": commits,
        "repository": {**payload["repository"], "full_name": repo, "default_branch": "main"},
        "installation": payload["installation"],
        "sender": payload["sender"],
    }


def onloop_pull(
    double: GitHubDouble, send: Send, repo: str, branch: str, human: bool, job_id: int = 1
) -> Issue:
    """onloop's commit (with its trailer) on `branch`, maybe a person's commit on top, their
    pushes and the pull request's `opened` delivered."""
    double.create_branch(repo, branch)
    trailer = f"Fix it\n\nOnloop-Job: {job_id}\n"
    shas = [double.commit(repo, branch, {"fix.py": "x = 1\n"}, trailer)]
    if human:
        shas.append(double.commit(repo, branch, {"fix.py": "x = 2\n"}, "Tweak the fix"))
    for sha in shas:  # one push each: onloop's, then the person's
        send("push", push_payload(double, repo, branch, [sha]))
    pull = double.create_pull(repo, branch, user="alice")
    send("pull_request", pull_payload(repo, pull, "opened"))
    return pull


def close(double: GitHubDouble, send: Send, repo: str, pull: Issue, merge: bool) -> str:
    """Close the pull request in the double, merged (a merge commit on main) or not; the
    merge commit's sha, or ""."""
    assert pull.pull is not None
    pull.state, pull.pull.merged = "closed", merge
    merge_sha = None
    if merge:
        merge_sha = double.commit(repo, "main", {"fix.py": "x = 2\n"}, f"Merge #{pull.number}")
    send("pull_request", pull_payload(repo, pull, "closed", merge_sha))
    return merge_sha or ""


def revert(double: GitHubDouble, send: Send, repo: str, sha: str) -> str:
    """A commit on main reverting `sha` as `git revert` words it, and its push delivered."""
    message = f'Revert "Fix it"\n\nThis reverts commit {sha}.\n'
    reverted = double.commit(repo, "main", {"fix.py": None}, message)
    send("push", push_payload(double, repo, "main", [reverted]))
    return reverted
