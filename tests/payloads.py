"""Webhook payloads for the GitHub double's repositories, edited from the shared fixtures."""

from __future__ import annotations

import itertools
from typing import Any

from tests.conftest import load_fixture
from tests.github_double.double import GitHubDouble

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
    data["issue"].update(number=number, state="open", user=_sender(double, user))
    data["issue"].pop("pull_request", None)
    return data
