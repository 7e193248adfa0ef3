"""Beat's purge of rebase backups: refs/onloop/backup/<branch>/<job id> older than backup_days."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from github import GithubException
from sqlalchemy import select, update

from app.core.kinds import Kind
from app.core.logs import get_logger
from app.core.settings import Settings
from app.github.clients import GitHubApp, InstallationUnavailable
from app.policy.org_config import load_org_config
from app.store.db import Database
from app.store.models import Job, JobState, utcnow
from tasks.blueprints.receipts import BACKUP_PREFIX, parse_backup_ref

log = get_logger("onloop.backups")
PURGED = "backup_purged"  # the key in a rebase job's result once its backup is settled


class Purged(StrEnum):
    """What became of an expired job's backup ref."""

    DELETED = "deleted"
    ABSENT = "absent"  # gone already (deleted by hand, or never written)
    UNREACHABLE = "installation_unavailable"  # the App was uninstalled or suspended


@dataclass(frozen=True)
class Expired:
    job_id: int
    repo: str
    installation_id: int


def expired(db: Database, days: int, now: datetime | None = None) -> list[Expired]:
    """Pushed rebases older than `days` whose backup is not settled yet: their age is the
    job's own time in the database, so no ref needs a call of its own to be dated."""
    cutoff = (now or utcnow()) - timedelta(days=days)
    with db.read() as s:
        rows = s.execute(
            select(Job.id, Job.repo, Job.installation_id, Job.result, Job.finished_at).where(
                Job.kind == Kind.REBASE_PR, Job.state == JobState.SUCCEEDED
            )
        ).all()
    return [
        Expired(job_id, repo, installation_id)
        for job_id, repo, installation_id, result, finished in rows
        if installation_id is not None
        and (result or {}).get("outcome") == "pushed"
        and PURGED not in (result or {})
        and finished is not None
        and _aware(finished) < cutoff
    ]


def purge(github: GitHubApp, db: Database, days: int, now: datetime | None = None) -> list[str]:
    """Delete the expired backup refs, one listing per repository (matching-refs) and one
    DELETE per ref, with an installation token narrowed to that repository and
    `contents: write`. Refs whose job this database does not know are left alone."""
    by_repo: dict[tuple[str, int], dict[int, Expired]] = defaultdict(dict)
    for item in expired(db, days, now):
        by_repo[(item.repo, item.installation_id)][item.job_id] = item
    deleted: list[str] = []
    for (name, installation_id), jobs in by_repo.items():
        try:
            token = github.installation_token(
                installation_id, repositories=[name], permissions={"contents": "write"}
            )
        except InstallationUnavailable:
            _settle(db, {job_id: Purged.UNREACHABLE for job_id in jobs})
            continue
        repo = github.installation_client(token).get_repo(name)
        outcome = {job_id: Purged.ABSENT for job_id in jobs}
        # https://docs.github.com/en/rest/git/refs#list-matching-references
        for ref in repo.get_git_matching_refs(BACKUP_PREFIX.removeprefix("refs/")):
            found = parse_backup_ref(ref.ref)
            if found is None or found[1] not in jobs:
                continue
            try:
                ref.delete()
            except GithubException as exc:
                if exc.status != 422:  # 422: "Reference does not exist", gone meanwhile
                    raise
                continue
            outcome[found[1]] = Purged.DELETED
            deleted.append(f"{name}:{ref.ref}")
            log.info("backup.deleted", repo=name, ref=ref.ref, job_id=found[1])
        _settle(db, outcome)
    return deleted


def sweep(settings: Settings, github: GitHubApp, db: Database) -> list[str]:
    """Beat's periodic task: purge under the organisation file's `backup_days`."""
    return purge(github, db, load_org_config(settings).backup_days)


def _settle(db: Database, outcome: dict[int, Purged]) -> None:
    with db.transaction() as s:
        for job_id, what in outcome.items():
            job = s.get(Job, job_id)
            if job is not None:
                s.execute(
                    update(Job)
                    .where(Job.id == job_id)
                    .values(result={**(job.result or {}), PURGED: str(what)})
                )


def _aware(when: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC."""
    return when if when.tzinfo else when.replace(tzinfo=utcnow().tzinfo)
