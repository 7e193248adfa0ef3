"""The double's world: users, the app, installations, repositories and tokens."""

from __future__ import annotations

import itertools
import secrets
import string
import threading
import time
from pathlib import Path

from app.github.manifest import PERMISSIONS as MANIFEST_PERMISSIONS
from tests.doubles.github import gitrepo
from tests.doubles.github.activity import Activity
from tests.doubles.github.handlers.actions import Actions
from tests.doubles.github.handlers.branches import Protections
from tests.doubles.github.handlers.checks import Checks
from tests.doubles.github.handlers.refs import BranchMerge
from tests.doubles.github.merging import Merging, PullEvent
from tests.doubles.github.model import (
    ROLES,
    App,
    Comment,
    Delivery,
    Installation,
    Repo,
    Review,
    ReviewReply,
    Token,
    User,
)
from tests.doubles.github.oauth import OAuthState
from tests.doubles.github.recording import Recorder
from tests.doubles.github.review_activity import ReviewActivity

# What `onloop setup`'s manifest asks for: jobs are tested with the App's real permissions.
DEFAULT_PERMISSIONS = dict(MANIFEST_PERMISSIONS)
DEFAULT_EVENTS = [
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "push",
    "check_suite",
    "workflow_run",
]


def _token_value(prefix: str) -> str:
    """A token shaped like GitHub's: prefix and 36 letters and digits."""
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(36))


class State(Activity, ReviewActivity, Merging, Recorder):
    """All mutable data; every handler runs holding `lock`."""

    def __init__(self, root: Path, app: App) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.root = root
        self.app = app
        self._ids = itertools.count(1001)
        self.clock_offset = 0.0
        self.installation_token_ttl = 3600
        self.users: dict[str, User] = {}
        self.installations: dict[int, Installation] = {}
        self.repos: dict[str, Repo] = {}
        self.comments_by_id: dict[int, Comment] = {}
        self.reviews: dict[int, Review] = {}
        self.review_replies: dict[int, ReviewReply] = {}  # by id (threads.py)
        self.resolved_threads: dict[int, str] = {}  # root comment id -> who resolved it
        self.tokens: dict[str, Token] = {}
        self.deliveries: list[Delivery] = []
        self.oauth = OAuthState(self)  # sign-in, codes, refresh tokens (oauth.py)
        self.actions = Actions()  # workflow runs, jobs and logs (handlers/actions.py)
        self.checks = Checks()  # check runs made by apps (handlers/checks.py)
        self.verified: set[str] = set()  # commits GitHub signed (createCommitOnBranch, merges)
        self.branch_merges: list[BranchMerge] = []  # POST /merges (handlers/refs.py)
        self.pull_log: list[PullEvent] = []  # pulls opened, closed, merged (merging.py)
        self.protections = Protections()  # branch protection, rulesets (handlers/branches.py)
        self.user(app.bot_login, type="Bot")
        self.user(app.owner)

    # --- clock and ids -------------------------------------------------------------------
    def now(self) -> float:
        """The double's time for token expiry (moved by `advance`); JWTs use real time."""
        return time.time() + self.clock_offset

    def advance(self, seconds: float) -> None:
        """Move the token clock forward, so tokens issued earlier may now be expired."""
        self.clock_offset += seconds

    def next_id(self) -> int:
        return next(self._ids)

    # --- users and installations ---------------------------------------------------------
    def user(self, login: str, type: str = "User", *, id: int | None = None) -> User:
        """The user `login` (type User, Bot or Organization), created on first mention."""
        with self.lock:
            found = self.users.get(login.lower())
            if found is None:
                found = User(id or self.next_id(), login, type)  # type: ignore[arg-type]
                self.users[login.lower()] = found
            return found

    def install(
        self,
        account: str,
        repositories: list[str] | None = None,
        permissions: dict[str, str] | None = None,
        *,
        id: int | None = None,
    ) -> Installation:
        """Install the app on `account` (all its repos, or the named full names); `id` lets a
        test match the installation id of a webhook fixture."""
        with self.lock:
            self.user(account)
            repos = None if repositories is None else {r.lower() for r in repositories}
            inst = Installation(
                id or self.next_id(),
                account,
                repos,
                dict(permissions or DEFAULT_PERMISSIONS),
                list(DEFAULT_EVENTS),
            )
            self.installations[inst.id] = inst
            return inst

    def uninstall(self, installation_id: int) -> None:
        """Delete the installation, as its owner does: its tokens stop working and minting
        another answers 404."""
        with self.lock:
            del self.installations[installation_id]
            for value, token in list(self.tokens.items()):
                if token.installation_id == installation_id:
                    del self.tokens[value]

    def suspend(self, installation_id: int, suspended: bool = True) -> None:
        """Suspend (or unsuspend) the installation: minting answers 403 meanwhile."""
        with self.lock:
            self.installations[installation_id].suspended = suspended

    def installation_for(self, repo: Repo) -> Installation | None:
        from tests.doubles.github.auth import covers

        return next((i for i in self.installations.values() if covers(i, repo)), None)

    # --- repositories ---------------------------------------------------------------------
    def find_repo(self, full_name: str) -> Repo | None:
        return self.repos.get(full_name.lower())

    def repo(self, full_name: str) -> Repo:
        found = self.find_repo(full_name)
        if found is None:
            raise KeyError(full_name)
        return found

    def create_repo(
        self,
        full_name: str,
        files: dict[str, str | bytes] | None = None,
        *,
        private: bool = False,
        default_branch: str = "main",
        installed: bool | None = None,
        fork_of: str | None = None,
        id: int | None = None,
    ) -> Repo:
        """A repository with a real bare git repo and an initial commit of `files` on the default
        branch. Unless `installed` is False (default for forks: not installed) the app is
        installed on it, creating the owner's installation if needed."""
        installed = not fork_of if installed is None else installed
        with self.lock:
            owner, name = full_name.split("/")
            self.user(owner)
            git_dir = self.root / "git" / owner / f"{name}.git"
            if fork_of:
                parent = self.repo(fork_of)
                gitrepo.clone_bare(parent.git_dir, git_dir)
                default_branch = parent.default_branch
            else:
                gitrepo.init_bare(git_dir, default_branch)
                gitrepo.commit(
                    git_dir,
                    default_branch,
                    dict(files or {"README.md": "hello\n"}),
                    "Initial commit",
                )
            repo = Repo(
                id or self.next_id(),
                owner,
                name,
                git_dir,
                private,
                default_branch,
                fork_of=self.repo(fork_of).full_name if fork_of else None,
                created_at=time.time(),
            )
            self.repos[full_name.lower()] = repo
            if installed and self.installation_for(repo) is None:
                existing = [
                    i for i in self.installations.values() if i.account.lower() == owner.lower()
                ]
                if existing and existing[0].repositories is not None:
                    existing[0].repositories.add(full_name.lower())
                elif not existing:
                    self.install(owner)
            return repo

    def set_permission(self, repo: str, login: str, role: str) -> None:
        """Make `login` a collaborator on `repo` with role read|triage|write|maintain|admin."""
        if role not in ROLES:
            raise ValueError(role)
        with self.lock:
            self.user(login)
            self.repo(repo).collaborators[login.lower()] = role

    def commit(
        self,
        repo: str,
        branch: str,
        files: dict[str, str | bytes | None],
        message: str = "change",
        author: tuple[str, str] | None = None,
    ) -> str:
        """Commit straight into the bare repo (branch created from nothing if missing)."""
        with self.lock:
            return gitrepo.commit(self.repo(repo).git_dir, branch, files, message, author)

    def create_branch(self, repo: str, branch: str, from_ref: str | None = None) -> str:
        with self.lock:
            r = self.repo(repo)
            sha = gitrepo.rev(r.git_dir, from_ref or r.default_branch)
            if sha is None:
                raise KeyError(from_ref)
            gitrepo.git(r.git_dir, "update-ref", f"refs/heads/{branch}", sha)
            return sha

    def branch_sha(self, repo: str, branch: str) -> str | None:
        return gitrepo.rev(self.repo(repo).git_dir, f"refs/heads/{branch}")

    # --- tokens ----------------------------------------------------------------------------
    def issue_installation_token(
        self,
        installation_id: int,
        expires_in: float | None = None,
        repositories: list[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> Token:
        """A `ghs_` token; `repositories` are full names within the installation."""
        with self.lock:
            ttl = self.installation_token_ttl if expires_in is None else expires_in
            token = Token(
                _token_value("ghs_"),
                "installation",
                self.now() + ttl,
                self.app.bot_login,
                installation_id,
                None if repositories is None else frozenset(r.lower() for r in repositories),
                None if permissions is None else dict(permissions),
            )
            self.tokens[token.value] = token
            return token

    def issue_user_token(self, login: str, expires_in: float = 8 * 3600) -> str:
        """A `ghu_` user-to-server token acting as `login` (what OAuth will hand out)."""
        with self.lock:
            self.user(login)
            token = Token(
                _token_value("ghu_"),
                "user",
                self.now() + expires_in,
                self.user(login).login,
            )
            self.tokens[token.value] = token
            return token.value

    def revoke(self, token: str) -> None:
        with self.lock:
            self.tokens.pop(token, None)
