"""Plain records of what the GitHub double knows: users, apps, repos, issues, tokens, calls."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROLES = ("read", "triage", "write", "maintain", "admin")
Role = Literal["read", "triage", "write", "maintain", "admin"]
IdentityKind = Literal["app", "installation", "user", "none"]


def role_at_least(role: str | None, needed: str) -> bool:
    """Whether collaborator `role` is `needed` or stronger."""
    return role is not None and ROLES.index(role) >= ROLES.index(needed)


@dataclass
class User:
    id: int
    login: str
    type: Literal["User", "Bot", "Organization"] = "User"
    name: str | None = None
    email: str | None = None


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: str
    client_id: str
    client_secret: str
    webhook_secret: str
    private_key_path: Path
    public_key_pem: bytes
    permissions: dict[str, str]
    events: list[str]

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"


@dataclass
class Installation:
    id: int
    account: str
    repositories: set[str] | None  # full names; None means "all" of the account's repos
    permissions: dict[str, str]
    events: list[str]
    suspended: bool = False

    @property
    def repository_selection(self) -> str:
        return "all" if self.repositories is None else "selected"


@dataclass
class PullData:
    head_repo: str  # full name of the repository holding the head branch (a fork or the same repo)
    head_ref: str
    base_ref: str
    head_sha: str  # last known; refreshed from git whenever the pull is read
    base_sha: str
    maintainer_can_modify: bool = False
    draft: bool = False
    merged: bool = False


@dataclass
class Issue:
    number: int
    id: int
    title: str
    body: str | None
    user: str
    created_at: float
    updated_at: float
    state: Literal["open", "closed"] = "open"
    labels: list[str] = field(default_factory=list)
    closed_at: float | None = None
    pull: PullData | None = None


@dataclass
class Reaction:
    id: int
    content: str
    user: str
    created_at: float


@dataclass
class Comment:
    id: int
    repo: str
    number: int
    body: str
    user: str
    created_at: float
    updated_at: float
    reactions: list[Reaction] = field(default_factory=list)


@dataclass
class Review:
    id: int
    repo: str
    number: int
    user: str
    event: str
    body: str
    commit_id: str
    comments: list[dict[str, Any]]  # each starts a review thread (threads.py)
    submitted_at: float


@dataclass
class ReviewReply:
    """A reply in the review thread that review comment `root` started."""

    id: int
    review_id: int  # GitHub gives each REST reply a review of its own
    root: int
    user: str
    body: str
    created_at: float


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    git_dir: Path
    private: bool = False
    default_branch: str = "main"
    fork_of: str | None = None
    collaborators: dict[str, str] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    next_number: int = 1
    created_at: float = 0.0
    topics: list[str] = field(default_factory=list)
    language: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Token:
    value: str = field(repr=False)
    kind: Literal["installation", "user"]
    expires_at: float
    login: str  # the actor: `<slug>[bot]` for installation tokens
    installation_id: int | None = None
    repositories: frozenset[str] | None = None  # narrowed full names; None = the installation's
    permissions: dict[str, str] | None = None  # narrowed; None = the installation's


@dataclass(frozen=True)
class Identity:
    """Who is behind a request's credentials."""

    kind: IdentityKind
    login: str | None = None
    installation_id: int | None = None
    app_id: int | None = None
    token: Token | None = field(default=None, repr=False, compare=False)


ANONYMOUS = Identity("none")


@dataclass
class Delivery:
    id: int
    guid: str
    event: str
    action: str | None
    delivered_at: float
    status_code: int = 200
    redelivery: bool = False
    duration: float = 0.05
    installation_id: int | None = None
    repository_id: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class Call:
    """One request as the double saw it (API paths are recorded without the /api/v3 prefix)."""

    surface: Literal["api", "git", "web"]
    method: str
    path: str
    query: dict[str, list[str]]
    json: Any
    identity: Identity
    status: int = 0  # 0 while the request is still being answered
    headers: dict[str, str] = field(default_factory=dict)  # request headers, minus Authorization
    fault: bool = False


@dataclass(frozen=True)
class RefUpdate:
    ref: str
    old: str | None  # None: the ref was created
    new: str | None  # None: the ref was deleted


@dataclass
class Push:
    repo: str
    identity: Identity
    updates: list[RefUpdate]


@dataclass
class Refusal:
    """Something onloop must never do (merge, approve), recorded and answered 403."""

    kind: Literal["merge", "approve"]
    repo: str
    number: int
    identity: Identity
    body: Any = None


@dataclass
class Fault:
    status: int  # 0: no error answer, only the delay
    remaining: int
    method: str | None = None
    path_prefix: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    delay: float = 0.0  # seconds to hold the request first (cut short by reset)
    released: threading.Event = field(default_factory=threading.Event)  # or by this

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.path_prefix is None or path.startswith(self.path_prefix)
        )
