"""Read `.github/onloop.yml` from the default branch (never the PR head) and cache it."""

from __future__ import annotations

from dataclasses import dataclass, field

from github import GithubException
from github.Repository import Repository
from sqlalchemy.dialects import postgresql, sqlite

from app.core.markdown import inline_code
from app.policy.repo_config import ORG_ONLY, ConfigError, RepoConfig, parse_repo_config
from app.store.db import Database
from app.store.models import RepoConfigCache, utcnow

CONFIG_PATH = ".github/onloop.yml"


@dataclass
class LoadedConfig:
    """The file as read. With `error` set the file is invalid and `config` (the built-in
    defaults) must not govern any work: a job refuses (tasks.blueprints.start). `unknown`
    and `org_only` are keys it sets that have no effect: no such key, or one only the
    organisation file sets."""

    config: RepoConfig
    unknown: list[str] = field(default_factory=list)
    error: ConfigError | None = None
    org_only: list[str] = field(default_factory=list)
    text: str | None = None  # the file as read (None: there is none)
    raised: list[str] = field(default_factory=list)  # budgets above the organisation's

    def ignored(self) -> list[str]:
        """One Markdown sentence for each kind of key set to no effect. The names are the
        file's: each is one code span it cannot leave (no @mention, no fence, no HTML)."""
        said = []
        for keys, what in (
            (self.unknown, "keys onloop does not know"),
            (self.org_only, "keys only the organisation file (ONLOOP_CONFIG_FILE) sets"),
            (self.raised, "budgets above the organisation's, refused (they may only lower it)"),
        ):
            if keys:
                names = ", ".join(inline_code(k) for k in keys)
                said.append(f"`{CONFIG_PATH}` has {what}, ignored: {names}.")
        return said


def remember(db: Database, name: str, text: str | None, sha: str | None) -> None:
    """Cache the file as read, in one upsert: jobs on a repository that has no row yet run at
    once, and a look-up then insert would let all but one of them fail on the primary key."""
    insert = sqlite.insert if db.sql.sqlite else postgresql.insert
    values = {"repo": name, "text": text, "sha": sha, "fetched_at": utcnow()}
    statement = insert(RepoConfigCache).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=[RepoConfigCache.repo],
        set_={k: statement.excluded[k] for k in ("text", "sha", "fetched_at")},
    )
    with db.transaction() as s:
        s.execute(statement)


def load_repo_config(db: Database, repo: Repository) -> LoadedConfig:
    """The repository's config from its default branch; a bad file comes back with `error`
    set, never silently as the defaults."""
    text: str | None = None
    sha: str | None = None
    try:
        content = repo.get_contents(CONFIG_PATH, ref=repo.default_branch)
        if not isinstance(content, list):
            text, sha = content.decoded_content.decode("utf-8", "replace"), content.sha
    except GithubException as exc:
        if exc.status != 404:
            raise
    remember(db, repo.full_name, text, sha)
    try:
        config, unknown = parse_repo_config(text)
    except ConfigError as exc:
        return LoadedConfig(RepoConfig(), error=exc, text=text)
    return LoadedConfig(
        config,
        [k for k in unknown if k not in ORG_ONLY],
        org_only=[k for k in unknown if k in ORG_ONLY],
        text=text,
    )
