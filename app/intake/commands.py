"""What onloop was asked to do: a Command, the output of `decide()` and the input of a job."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict, cast

from app.core.kinds import KINDS, Kinds


class CommandParams(TypedDict, total=False):
    """A command's own parameters: a comment's verb, or a failing run's details."""

    verb: str  # `/agent <verb> <args>`
    args: str
    unknown_verb: str  # a verb onloop does not know: `help` answers
    refused_verb: str  # a verb `.github/onloop.yml` does not enable: `help` answers
    automatic: bool  # fix_ci started by a failing run, not by a person
    run_kind: str  # the event of the failing run: workflow_run or check_suite
    run_id: int | None
    head_branch: str | None
    head_repo_id: int | None
    find_prs: bool  # a fork's run lists no PR: the worker finds it by head sha
    default_branch: bool  # the run failed on the default branch, not on a PR
    # fix_issue: the issue as it read when it was labelled (`issue_digest` of its text)
    issue_updated_at: str
    issue_sha256: str
    review_id: int  # address_review: the review that asked
    implicit: bool  # nobody typed a command (a review): refusals are said nowhere
    schedule: str  # the `schedules:` entry whose slot made the job (tasks/queue/schedules.py)
    slot: str  # that slot, ISO 8601 UTC


def issue_digest(title: str | None, body: str | None) -> str:
    """The sha256 of an issue's title and body, which pins the text a person acted on.

    Line endings are normalised (the web editor sends CRLF) and the pair is JSON-encoded, so
    that no split of the same characters between title and body gives the same digest."""
    text = [(part or "").replace("\r\n", "\n").strip() for part in (title, body)]
    return hashlib.sha256(json.dumps(text).encode()).hexdigest()


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
    params: CommandParams = field(default_factory=CommandParams)
    # The person's act this command comes from (`trigger_key`), which starts work once
    # whatever GUIDs it is delivered under; None for events that are not one person's act.
    trigger: str | None = None

    def live_key(self, number: int | None, kinds: Kinds = KINDS) -> str:
        """Identity of a live job, which a second identical request joins rather than making
        another: one per (kind, repo, number, head sha) and, for work a person asked for, per
        person.

        Why per person: a joined request runs as the job's requester, and only the worker
        can tell (from GitHub) who may run it; intake cannot. Were people to share one job,
        a maintainer's `/agent rebase` joining an outsider's would be refused with it and
        lost, and an outsider's joining a maintainer's would be answered as if authorised.
        So each person gets a job of their own, which the worker checks against that person
        alone, and only a person's own repeats join. Two maintainers asking at once make two
        jobs; the second finds the work done or the branch moved (rebase pushes with a
        lease), which costs a sandbox, not a wrong result. Automatic CI fixes, which no
        person asked for, stay one job per head however many failed runs report it.
        Comment replies are keyed on the comment, so each question gets its own answer.
        """
        tail = self.head_sha or ""
        spec = kinds.get(self.kind)
        if spec is not None and not spec.sandboxed:
            tail = f"comment-{self.comment_id}"
        elif not self.params.get("automatic"):
            who = f"id-{self.requested_by_id}" if self.requested_by_id is not None else ""
            tail += f":by-{who or 'login-' + self.requested_by.lower()}"
        return f"{self.kind}:{self.repo}:{number if number is not None else '-'}:{tail}"

    def to_params(self) -> dict[str, Any]:
        """The JSON stored as the job's `params`; `from_params` reads it back."""
        data = asdict(self)
        data["numbers"] = list(self.numbers)
        return data

    @classmethod
    def from_params(cls, data: Mapping[str, Any]) -> Command:
        """The Command `to_params` stored; missing keys take their defaults, others are
        ignored (the worker adds `authorization_expired`)."""
        inner = data.get("params")
        return cls(
            kind=str(data.get("kind") or ""),
            repo=str(data.get("repo") or ""),
            requested_by=str(data.get("requested_by") or ""),
            numbers=tuple(int(n) for n in data.get("numbers") or ()),
            repo_id=_int(data.get("repo_id")),
            installation_id=_int(data.get("installation_id")),
            head_sha=str(data["head_sha"]) if data.get("head_sha") else None,
            requested_by_id=_int(data.get("requested_by_id")),
            comment_id=_int(data.get("comment_id")),
            params=cast(CommandParams, dict(inner)) if isinstance(inner, Mapping) else {},
            trigger=str(data["trigger"]) if data.get("trigger") else None,
        )


def trigger_key(kind: str, repo: str, repo_id: int | None, *parts: object) -> str:
    """The key of a person's act: `comment:<repo id>:<comment id>`, or
    `label:<repo id>:<issue number>:<label>:<time of labelling>` (the repository's name stands
    in when a payload names no id)."""
    where = str(repo_id) if repo_id is not None else f"name-{repo.lower()}"
    return ":".join((kind, where, *map(str, parts)))


def _int(value: object) -> int | None:
    """An id as the stored JSON holds it (a number); anything else is None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
