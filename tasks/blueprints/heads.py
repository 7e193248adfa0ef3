"""Whether a job trusts the code at the head it runs; tasks/sandbox/trust.py says what follows."""

from __future__ import annotations

from github.Repository import Repository

from tasks.blueprints.pulls import PullRef
from tasks.runner.people import permitted, role_of
from tasks.sandbox.trust import HeadTrust


def head_trust(repo: Repository, pull: PullRef | None, required: str) -> HeadTrust:
    """A pull request's head is untrusted when it comes from a fork (or one since deleted)
    or its author lacks `required`, the repository's trigger permission: whoever may run a
    job on it, the code there is someone else's. Work on a branch of the repository with no
    pull request (the default branch) is trusted."""
    if pull is None:
        return HeadTrust.TRUSTED
    if pull.fork or not pull.author:
        return HeadTrust.UNTRUSTED
    if not permitted(role_of(repo, pull.author), required):
        return HeadTrust.UNTRUSTED
    return HeadTrust.TRUSTED
