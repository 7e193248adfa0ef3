"""Webhook payloads for the GitHub double's repositories, edited from the shared fixtures."""

from __future__ import annotations

import itertools
import time
from typing import Any

from tests.doubles.github import shapes
from tests.doubles.github.api import Ctx, iso
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers import review_comments
from tests.doubles.github.model import Review
from tests.doubles.github.threads import locate, threads
from tests.doubles.webhooks import load_fixture

_comment_ids = itertools.count(900_000)


def _repository(double: GitHubDouble, full_name: str) -> dict[str, Any]:
    repo = double.repo(full_name)
    owner, name = repo.full_name.split("/")
    return {
        "id": repo.id,
        "name": name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": {"login": owner, "id": double.user(owner).id, "type": "User"},
        "default_branch": repo.default_branch,
    }


def _installation_id(double: GitHubDouble, full_name: str) -> int:
    inst = double.installation_for(double.repo(full_name))
    assert inst is not None, f"the app is not installed on {full_name}"
    return inst.id


def _sender(double: GitHubDouble, login: str) -> dict[str, Any]:
    user = double.user(login)
    return {"login": user.login, "id": user.id, "type": user.type}


def pr_comment(
    double: GitHubDouble, repo: str, number: int, body: str, user: str = "octocat"
) -> dict[str, Any]:
    """issue_comment.created on pull request `number`, as GitHub sends it."""
    data = load_fixture("issue_comment.created.with-installation")
    data["repository"] = _repository(double, repo)
    data["installation"] = {"id": _installation_id(double, repo)}
    data["sender"] = _sender(double, user)
    data["issue"].update(
        number=number,
        state="open",
        user=_sender(double, user),
        pull_request={"url": f"{double.api_url}/repos/{repo}/pulls/{number}"},
    )
    data["comment"].update(id=next(_comment_ids), body=body, user=_sender(double, user))
    return data


def issue_labeled(
    double: GitHubDouble, repo: str, number: int, label: str = "agent:fix", user: str = "octocat"
) -> dict[str, Any]:
    data = load_fixture("issues.labeled")
    data["repository"] = _repository(double, repo)
    data["installation"] = {"id": _installation_id(double, repo)}
    data["sender"] = _sender(double, user)
    data["label"]["name"] = label
    # The issue as it reads at the label, as GitHub sends it (labelling sets `updated_at`).
    issue = double.issue(repo, number)
    data["issue"].update(
        number=number,
        state="open",
        user=_sender(double, issue.user),
        title=issue.title,
        body=issue.body,
        updated_at=iso(time.time()),
    )
    data["issue"].pop("pull_request", None)
    return data


def _pull_ref(double: GitHubDouble, repo: str, number: int) -> dict[str, Any]:
    """A `pull_requests` item of a check suite or workflow run, as GitHub lists it."""
    pull = double.issue(repo, number).pull
    assert pull is not None
    head_repo = double.repo(pull.head_repo)
    base_repo = double.repo(repo)
    return {
        "url": f"{double.api_url}/repos/{repo}/pulls/{number}",
        "id": number * 1000,
        "number": number,
        "head": {
            "ref": pull.head_ref,
            "sha": double.branch_sha(pull.head_repo, pull.head_ref),
            "repo": {"id": head_repo.id, "name": head_repo.full_name.split("/")[1]},
        },
        "base": {
            "ref": pull.base_ref,
            "sha": double.branch_sha(repo, pull.base_ref),
            "repo": {"id": base_repo.id, "name": base_repo.full_name.split("/")[1]},
        },
    }


def workflow_run_failed(
    double: GitHubDouble, repo: str, run: Any, number: int | None, user: str = "octocat"
) -> dict[str, Any]:
    """workflow_run.completed with conclusion failure for the double's run `run`."""
    data = load_fixture("workflow_run.completed.with-pull-requests")
    data["repository"] = _repository(double, repo)
    data["installation"] = {"id": _installation_id(double, repo)}
    data["sender"] = _sender(double, user)
    data["workflow_run"].update(
        id=run.id,
        head_sha=run.head_sha,
        head_branch=run.head_branch,
        conclusion="failure",
        status="completed",
        check_suite_id=run.check_suite_id,
        head_repository=data["repository"],
        pull_requests=[_pull_ref(double, repo, number)] if number is not None else [],
    )
    return data


def check_suite_failed(
    double: GitHubDouble, repo: str, run: Any, number: int | None, user: str = "octocat"
) -> dict[str, Any]:
    """check_suite.completed with conclusion failure for the suite of the double's run `run`."""
    data = load_fixture("check_suite.completed")
    data["repository"] = _repository(double, repo)
    data["installation"] = {"id": _installation_id(double, repo)}
    data["sender"] = _sender(double, user)
    data["check_suite"].update(
        id=run.check_suite_id,
        head_sha=run.head_sha,
        head_branch=run.head_branch,
        conclusion="failure",
        status="completed",
        pull_requests=[_pull_ref(double, repo, number)] if number is not None else [],
    )
    return data


def _ctx(double: GitHubDouble) -> Ctx:
    """A request context for shaping objects the way the double's REST API shows them."""
    return Ctx(double, "GET", "", {}, {}, b"", double.url)


def pull_request_review(
    double: GitHubDouble, repo: str, review: Review, action: str = "submitted"
) -> dict[str, Any]:
    """pull_request_review.<action> for the double's review, shaped like octokit/webhooks'
    `pull_request_review/submitted.payload.json`: the REST review and pull request, except that
    the webhook's `review.state` is lower case ("commented", "changes_requested", "approved")."""
    ctx = _ctx(double)
    r = double.repo(repo)
    shown = shapes.review(ctx, review)
    shown["state"] = shown["state"].lower()
    shown["_links"] = {
        "html": {"href": shown["html_url"]},
        "pull_request": {"href": shown["pull_request_url"]},
    }
    return {
        "action": action,
        "review": shown,
        "pull_request": shapes.pull(ctx, r, double.issue(repo, review.number)),
        "repository": _repository(double, repo),
        "installation": {"id": _installation_id(double, repo)},
        "sender": _sender(double, review.user),
    }


def pull_request_review_comment(
    double: GitHubDouble, repo: str, comment_id: int, action: str = "created"
) -> dict[str, Any]:
    """pull_request_review_comment.<action> for review comment (or reply) `comment_id`, its
    `comment` as the REST API shows it (a reply has `in_reply_to_id`), like octokit/webhooks'
    `pull_request_review_comment/created.payload.json`."""
    ctx = _ctx(double)
    r = double.repo(repo)
    found = locate(double, comment_id)
    assert found is not None, f"no review comment {comment_id}"
    issue = double.issue(repo, found[0].number)
    files = review_comments.files_of(ctx, r, issue)
    (comment,) = [
        review_comments.comment_json(ctx, r, issue, t, e, files)
        for t in threads(ctx, r, issue)
        for e in t.entries
        if e.id == comment_id
    ]
    return {
        "action": action,
        "comment": comment,
        "pull_request": shapes.pull(ctx, r, issue),
        "repository": _repository(double, repo),
        "installation": {"id": _installation_id(double, repo)},
        "sender": _sender(double, comment["user"]["login"]),
    }


def push(double: GitHubDouble, repo: str, ref: str, user: str = "alice") -> dict[str, Any]:
    """A `push` of `ref`'s current tip (commits as GitHub lists them are not needed here)."""
    sha = double.branch_sha(repo, ref.removeprefix("refs/heads/"))
    return {
        "ref": ref,
        "after": sha,
        "commits": [],
        "repository": _repository(double, repo),
        "installation": {"id": _installation_id(double, repo)},
        "sender": _sender(double, user),
    }
