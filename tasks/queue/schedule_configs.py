"""The `.github/onloop.yml` of every installed repository, for beat's schedule tick: the same
cached rows jobs read and write (repo_configs), refreshed through conditional reads."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from github import GithubException
from sqlalchemy import select

from app.core.logs import get_logger
from app.github.clients import GitHubApp, InstallationUnavailable
from app.github.conditional import ETagCache, conditional_contents, conditional_get
from app.store.db import Database
from app.store.models import Installation, RepoConfigCache, aware
from tasks.runner.repo_settings import CONFIG_PATH, remember

log = get_logger("onloop.schedules")
# A cached file older than this is read again; GitHub answers an unchanged one 304, which
# costs no rate limit (app/github/conditional.py). A push to the default branch makes it
# due at once (app/intake/config_push.py), and every job on the repository reads it afresh.
REFRESH = timedelta(hours=1)


@dataclass(frozen=True)
class Installed:
    """One repository of a live installation, with its config file as last read."""

    repo: str
    installation_id: int
    text: str | None


def installed(db: Database, github: GitHubApp, etags: ETagCache, now: datetime) -> list[Installed]:
    """Every repository of every installation that is neither deleted nor suspended, each
    with its config file; files read more than REFRESH ago are read again first."""
    with db.read() as s:
        installations = s.execute(
            select(Installation.id, Installation.repositories).where(
                Installation.deleted_at.is_(None), Installation.suspended.is_(False)
            )
        ).all()
        cached = {
            repo: (text, aware(at))
            for repo, text, at in s.execute(
                select(RepoConfigCache.repo, RepoConfigCache.text, RepoConfigCache.fetched_at)
            )
        }
    stale: dict[int, list[str]] = defaultdict(list)
    places: list[tuple[str, int]] = []
    for installation_id, names in installations:
        for name in sorted(str(n) for n in names or []):
            places.append((name, int(installation_id)))
            fetched = cached.get(name, (None, None))[1]
            if fetched is None or fetched < now - REFRESH:
                stale[int(installation_id)].append(name)
    for installation_id, names in stale.items():
        for name, text in _refresh(db, github, etags, installation_id, names).items():
            cached[name] = (text, now)
    return [Installed(name, iid, cached[name][0]) for name, iid in places if name in cached]


def _refresh(
    db: Database, github: GitHubApp, etags: ETagCache, installation_id: int, names: list[str]
) -> dict[str, str | None]:
    """Read the files of `names` (one token for the installation) and cache them; a
    repository GitHub does not answer keeps its cached file."""
    try:
        token = github.installation_token(
            installation_id, repositories=names, permissions={"contents": "read"}
        )
    except InstallationUnavailable:
        log.info("schedules.installation_unavailable", installation_id=installation_id)
        return {}
    client = github.installation_client(token)
    read: dict[str, str | None] = {}
    for name in names:
        try:
            about = conditional_get(client, f"/repos/{name}", None, etags)
            found = conditional_contents(
                client, name, CONFIG_PATH, str(about["default_branch"]), etags
            )
        except GithubException as exc:
            log.warning("schedules.config_unread", repo=name, status=exc.status)
            continue
        text, sha = found if found is not None else (None, None)
        remember(db, name, text, sha)
        read[name] = text
    return read
