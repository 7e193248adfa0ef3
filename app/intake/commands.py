"""What onloop was asked to do: a Command, the output of `decide()` and the input of a job."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.kinds import KINDS


@dataclass(frozen=True)
class Command:
    """A request for work on one repository.

    `numbers` holds the issue or PR numbers it concerns; a check suite can name several PRs,
    and a fork's failing run names none (the worker finds the PR from `head_sha`).
    """

    kind: str
    repo: str
    requested_by: str
    numbers: tuple[int, ...] = ()
    repo_id: int | None = None
    installation_id: int | None = None
    head_sha: str | None = None
    requested_by_id: int | None = None
    comment_id: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def live_key(self, number: int | None) -> str:
        """Identity of a live job: one per (kind, repo, number, head sha).

        Comment replies are keyed on the comment, so each question gets its own answer.
        """
        tail = self.head_sha or ""
        spec = KINDS.get(self.kind)
        if spec is not None and not spec.sandboxed:
            tail = f"comment-{self.comment_id}"
        return f"{self.kind}:{self.repo}:{number if number is not None else '-'}:{tail}"

    def to_params(self) -> dict[str, Any]:
        data = asdict(self)
        data["numbers"] = list(self.numbers)
        return data


@dataclass(frozen=True)
class CancelStale:
    """Not a job: cancel a PR's live jobs that were started for another head."""

    repo: str
    number: int
    head_sha: str | None
    reason: str


@dataclass(frozen=True)
class InstallationChange:
    """Not a job: keep the installation table in step with GitHub."""

    installation_id: int
    action: str
    account_login: str
    account_type: str | None
    repositories: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class RevokeAuthorization:
    """Not a job: the person revoked onloop's authorisation; forget their tokens."""

    user_id: int
    login: str
