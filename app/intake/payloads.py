"""The webhook payload fields onloop reads, typed; `read_payload` keeps those of the right type.

GitHub signs what it sends, but a field's JSON type is still only GitHub's word: read through
here, a field of the wrong type reads as absent, so `decide` never trips over one.
https://docs.github.com/en/webhooks/webhook-events-and-payloads
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict, cast, get_args, get_origin, get_type_hints, is_typeddict


class User(TypedDict, total=False):
    """A sender, or a comment's author."""

    id: int
    login: str
    type: str  # "User", "Bot", "Organization"


class Repository(TypedDict, total=False):
    id: int
    full_name: str
    default_branch: str


class Head(TypedDict, total=False):
    """A pull request's head: its commit, branch and repository (a fork's, maybe)."""

    sha: str
    ref: str
    repo: Repository


class PullRequest(TypedDict, total=False):
    number: int
    merged: bool
    head: Head


class IssuePullRequest(TypedDict, total=False):
    """Present on an issue only when the issue is a pull request."""

    url: str


class Issue(TypedDict, total=False):
    number: int
    state: str  # "open", "closed"
    title: str
    body: str  # null when empty: reads as absent
    updated_at: str  # ISO 8601; an `issues.labeled` payload has the labelling's time
    pull_request: IssuePullRequest


class Label(TypedDict, total=False):
    name: str


class Comment(TypedDict, total=False):
    id: int
    body: str
    user: User
    created_at: str  # ISO 8601


class App(TypedDict, total=False):
    id: int


class Run(TypedDict, total=False):
    """A check suite or a workflow run."""

    id: int
    conclusion: str
    head_sha: str
    head_branch: str
    head_repository: Repository
    pull_requests: list[PullRequest]
    app: App


class Account(TypedDict, total=False):
    login: str
    type: str  # "User", "Organization"


class Installation(TypedDict, total=False):
    id: int
    account: Account


class Payload(TypedDict, total=False):
    """A delivery's body, as far as onloop reads it."""

    action: str
    number: int
    sender: User
    repository: Repository
    installation: Installation
    issue: Issue
    label: Label
    comment: Comment
    pull_request: PullRequest
    check_suite: Run
    workflow_run: Run
    repositories: list[Repository]  # installation.created
    repositories_added: list[Repository]  # installation_repositories
    repositories_removed: list[Repository]


# A reader returns the value it was given when its type is right, else None ("absent").
Reader = Callable[[object], object]


def integer(value: object) -> int | None:
    """An int; JSON's true and false are not numbers, though Python's bool is an int."""
    return value if type(value) is int else None


def string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def boolean(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def reader(hint: object) -> Reader:
    """The reader for a field annotated `hint`: int, str, bool, a TypedDict or a list of one.
    An object keeps only its fields of the right type; a list only its items of it."""
    if hint is int:
        return integer
    if hint is str:
        return string
    if hint is bool:
        return boolean
    if get_origin(hint) is list:
        (item,) = get_args(hint)
        return _list_reader(reader(item))
    if is_typeddict(hint):
        return _object_reader(get_type_hints(cast(type, hint)))
    raise TypeError(f"no reader for {hint!r}")


def _list_reader(item: Reader) -> Reader:
    def read(value: object) -> list[object] | None:
        if not isinstance(value, list):
            return None
        return [kept for kept in map(item, value) if kept is not None]

    return read


def _object_reader(hints: Mapping[str, object]) -> Reader:
    fields = {key: reader(hint) for key, hint in hints.items()}

    def read(value: object) -> dict[str, object] | None:
        if not isinstance(value, Mapping):
            return None
        kept = {key: field(value[key]) for key, field in fields.items() if key in value}
        return {key: item for key, item in kept.items() if item is not None}

    return read


_read_payload = reader(Payload)  # built once, at import


def read_payload(data: Mapping[str, object]) -> Payload:
    """The fields of `data` that onloop reads and that have the type `Payload` gives them."""
    return cast(Payload, _read_payload(data) or {})
