"""The webhook payload fields onloop reads, typed; `read_payload` keeps those of the right type.

GitHub signs what it sends, but a field's JSON type is still only GitHub's word: read through
here, a field of the wrong type reads as absent, so `decide` never trips over one.
https://docs.github.com/en/webhooks/webhook-events-and-payloads
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import (
    Annotated,
    Any,
    Optional,
    TypedDict,
    cast,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from annotated_types import Interval, MaxLen

# The bounds of what onloop stores (app/store/models.py): ids in BIGINT columns, issue and
# PR numbers in INTEGER ones, names in VARCHARs of these lengths. A value beyond them is not
# GitHub's (logins have at most 39 characters, repository names 100).
Id = Annotated[int, Interval(ge=0, le=2**63 - 1)]
Number = Annotated[int, Interval(ge=0, le=2**31 - 1)]
Login = Annotated[str, MaxLen(100)]
FullName = Annotated[str, MaxLen(200)]
Sha = Annotated[str, MaxLen(40)]
Name = Annotated[str, MaxLen(100)]  # a label, a type, an action
Time = Annotated[str, MaxLen(40)]  # ISO 8601


class User(TypedDict, total=False):
    """A sender, or a comment's author."""

    id: Id
    login: Login
    type: Name  # "User", "Bot", "Organization"


class Repository(TypedDict, total=False):
    id: Id
    full_name: FullName
    default_branch: str


class Head(TypedDict, total=False):
    """A pull request's head: its commit, branch and repository (a fork's, maybe)."""

    sha: Sha
    ref: str
    repo: Repository


class PullRequest(TypedDict, total=False):
    number: Number
    state: Name  # "open", "closed"
    merged: bool
    head: Head
    created_at: Time  # ISO 8601
    closed_at: Time
    merged_at: Time
    merge_commit_sha: Sha  # the merge, squash or last rebased commit once merged


class IssuePullRequest(TypedDict, total=False):
    """Present on an issue only when the issue is a pull request."""

    url: str


class Issue(TypedDict, total=False):
    number: Number
    state: Name  # "open", "closed"
    title: str
    body: str  # null when empty: reads as absent
    updated_at: Time  # ISO 8601; an `issues.labeled` payload has the labelling's time
    pull_request: IssuePullRequest


class Label(TypedDict, total=False):
    name: Name


class Comment(TypedDict, total=False):
    id: Id
    body: str
    user: User
    created_at: Time  # ISO 8601
    in_reply_to_id: Id  # a review comment's thread: the comment it answers
    author_association: Name


class Review(TypedDict, total=False):
    """A pull request review (`pull_request_review`); its `state` is lowercase in webhooks
    ("commented", "changes_requested", "approved") and uppercase in the REST API."""

    id: Id
    user: User
    body: str
    state: Name
    commit_id: Sha
    author_association: Name
    submitted_at: Time  # ISO 8601


class App(TypedDict, total=False):
    id: Id


class Run(TypedDict, total=False):
    """A check suite or a workflow run."""

    id: Id
    conclusion: Name
    head_sha: Sha
    head_branch: str
    head_repository: Repository
    pull_requests: list[PullRequest]
    app: App


class Account(TypedDict, total=False):
    login: Login
    type: Annotated[str, MaxLen(20)]  # "User", "Organization"


class Installation(TypedDict, total=False):
    id: Id
    account: Account


class PushCommit(TypedDict, total=False):
    """One commit of a `push` delivery
    (https://docs.github.com/en/webhooks/webhook-events-and-payloads#push)."""

    id: Sha
    message: str
    timestamp: Time
    distinct: bool  # not pushed to any branch of the repository before


class Payload(TypedDict, total=False):
    """A delivery's body, as far as onloop reads it."""

    action: Annotated[str, MaxLen(64)]
    number: Number
    sender: User
    repository: Repository
    installation: Installation
    issue: Issue
    label: Label
    comment: Comment
    review: Review
    pull_request: PullRequest
    check_suite: Run
    workflow_run: Run
    repositories: list[Repository]  # installation.created
    repositories_added: list[Repository]  # installation_repositories
    repositories_removed: list[Repository]
    ref: str  # push: the full ref, `refs/heads/<branch>`
    commits: list[PushCommit]  # push: the commits pushed, oldest first


# A reader returns the value it was given when its type and bounds are right, else None
# ("absent"), and says why under the field's path in `problems`.
Problems = list[str]
Reader = Callable[[object, str, Problems], object]


MAX_PROBLEMS = 20  # enough to name the fields; a body of a million bad items names no more


def _problem(problems: Problems, path: str, what: str) -> None:
    if len(problems) < MAX_PROBLEMS:
        problems.append(f"{path or 'body'}: {what}")


def integer(value: object, path: str = "", problems: Problems | None = None) -> int | None:
    """An int; JSON's true and false are not numbers, though Python's bool is an int."""
    if type(value) is int:
        return value
    if value is not None and problems is not None:
        _problem(problems, path, "expected an integer")
    return None


def string(value: object, path: str = "", problems: Problems | None = None) -> str | None:
    """A str that a database can store: no NUL character (PostgreSQL text refuses it) and no
    unpaired surrogate (JSON's `\\ud800` decodes to one; it has no UTF-8 encoding)."""
    if isinstance(value, str):
        if value.isascii() and "\0" not in value:
            return value
        if "\0" not in value:
            try:
                value.encode()
                return value
            except UnicodeEncodeError:
                pass
        if problems is not None:
            _problem(problems, path, "contains a NUL character or an unpaired surrogate")
        return None
    if value is not None and problems is not None:
        _problem(problems, path, "expected a string")
    return None


def boolean(value: object, path: str = "", problems: Problems | None = None) -> bool | None:
    if isinstance(value, bool):
        return value
    if value is not None and problems is not None:
        _problem(problems, path, "expected true or false")
    return None


def _bounded(read: Reader, bounds: tuple[object, ...]) -> Reader:
    """`read`, then the `annotated_types` bounds of the field: the columns' limits."""
    low = next((b.ge for b in bounds if isinstance(b, Interval) and b.ge is not None), None)
    high = next((b.le for b in bounds if isinstance(b, Interval) and b.le is not None), None)
    longest = next((b.max_length for b in bounds if isinstance(b, MaxLen)), None)

    def check(value: object, path: str, problems: Problems) -> object:
        kept = read(value, path, problems)
        if isinstance(kept, int) and not (
            (low is None or kept >= low) and (high is None or kept <= high)  # type: ignore[operator]
        ):
            _problem(problems, path, f"expected an integer from {low} to {high}")
            return None
        if isinstance(kept, str) and longest is not None and len(kept) > longest:
            _problem(problems, path, f"longer than {longest} characters")
            return None
        return kept

    return check


def reader(hint: object) -> Reader:
    """The reader for a field annotated `hint`: int, str, bool, a TypedDict or a list of one,
    maybe `Annotated` with bounds. An object keeps only its fields of the right type and
    within their bounds; a list only its items that are."""
    if get_origin(hint) is Annotated:
        inner, *bounds = get_args(hint)
        return _bounded(reader(inner), tuple(bounds))
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
        return _object_reader(get_type_hints(cast(type, hint), include_extras=True))
    raise TypeError(f"no reader for {hint!r}")


def _list_reader(item: Reader) -> Reader:
    def read(value: object, path: str, problems: Problems) -> list[object] | None:
        if not isinstance(value, list):
            if value is not None:
                _problem(problems, path, "expected a list")
            return None
        kept = (item(each, f"{path}[{i}]", problems) for i, each in enumerate(value))
        return [each for each in kept if each is not None]

    return read


def _object_reader(hints: Mapping[str, object]) -> Reader:
    fields = {key: reader(hint) for key, hint in hints.items()}

    def read(value: object, path: str, problems: Problems) -> dict[str, object] | None:
        if not isinstance(value, Mapping):
            if value is not None:
                _problem(problems, path, "expected an object")
            return None
        kept = {
            key: field(value[key], f"{path}.{key}" if path else key, problems)
            for key, field in fields.items()
            if key in value
        }
        return {key: item for key, item in kept.items() if item is not None}

    return read


_read_payload = reader(Payload)  # built once, at import


def nullable(hint: object) -> object:
    """`hint` as msgspec decodes it: every field `T | None`, bounds left to the readers, and
    an object's other fields skipped. A body that fits it (nearly every one GitHub sends)
    is decoded into the fields onloop reads alone; one that does not is read field by field
    (a wrong type read as absent, and named)."""
    if get_origin(hint) is Annotated:
        return nullable(get_args(hint)[0])
    if hint in (int, str, bool):
        return Optional[hint]  # noqa: UP045 - a type made at run time
    if get_origin(hint) is list:
        (item,) = get_args(hint)
        return Optional[list[nullable(item)]]  # type: ignore[misc]  # noqa: UP045
    if is_typeddict(hint):
        hints = get_type_hints(cast(type, hint), include_extras=True)
        fields = {key: nullable(each) for key, each in hints.items()}
        made: Any = TypedDict  # the functional form, with names known only at run time
        return Optional[made(cast(type, hint).__name__, fields, total=False)]  # noqa: UP045
    raise TypeError(f"no nullable form of {hint!r}")


def read_payload(data: Mapping[str, object]) -> Payload:
    """The fields of `data` that onloop reads and that have the type `Payload` gives them."""
    return checked_payload(data)[0]


def checked_payload(data: Mapping[str, object]) -> tuple[Payload, tuple[str, ...]]:
    """`read_payload`, and what was left out of it: a field of the wrong type, out of its
    bounds, or a string no database stores ("installation.id: expected an integer")."""
    problems: Problems = []
    return cast(Payload, _read_payload(data, "", problems) or {}), tuple(problems)
