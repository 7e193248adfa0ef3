"""Feedback's own way to GitHub: a narrowed installation token, renewed, and the 👀 it sends."""

from __future__ import annotations

import threading

from github import Github
from github.Repository import Repository

import app.github.clients as gh
from app.policy import governance
from tasks.runner.context import JobContext


class Access:
    """The job's repository through an installation token of the listeners' own, narrowed to
    that one repository and to what feedback writes, renewed before it expires; one GitHub
    call at a time (the throttles' timers call from threads)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.lock = threading.RLock()
        self._token: gh.InstallationToken | None = None
        self._client: Github | None = None
        self._repo: Repository | None = None

    def client(self) -> Github:
        if self._client is None or self._token is None or self._token.expires_within():
            ctx = self.ctx
            assert ctx.job.installation_id is not None
            name = ctx.job.repo.split("/", 1)[1]
            self._token = ctx.github.installation_token(
                ctx.job.installation_id,
                repositories=[name],
                permissions=governance.feedback_permissions(),
            )
            self._client, self._repo = ctx.github.installation_client(self._token), None
        return self._client

    def repo(self) -> Repository:
        client = self.client()
        if self._repo is None:
            self._repo = client.get_repo(self.ctx.job.repo)
        return self._repo


def acknowledge(ctx: JobContext, access: Access) -> None:
    """👀 on the comment that asked for the job: the first thing the worker does for it."""
    comment_id = ctx.command.comment_id
    if not comment_id:
        return
    with access.lock:
        access.client().requester.requestJsonAndCheck(
            "POST",
            f"/repos/{ctx.job.repo}/issues/comments/{comment_id}/reactions",
            input={"content": "eyes"},
        )
