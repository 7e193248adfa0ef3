"""The header on every page: each installation's pause state (`onloop pause`, the `pauses`
table) and its running and queued jobs against ONLOOP_MAX_JOBS_PER_INSTALLATION. Operators
see every installation; anyone else those that own the repositories the page shows them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select

from app.core.settings import Settings
from app.policy.governance import INSTALLATION, REPO, pauses
from app.store.db import Database
from app.store.models import Installation, Job, JobState


@dataclass(frozen=True)
class Load:
    """One installation as the header shows it."""

    id: int
    account: str
    paused: bool
    reason: str
    paused_repos: list[str]  # its repositories paused one by one (those shown to the person)
    running: int
    queued: int
    cap: int  # running jobs at once (ONLOOP_MAX_JOBS_PER_INSTALLATION)

    @property
    def full(self) -> bool:
        return self.running >= self.cap


@dataclass(frozen=True)
class Header:
    installations: list[Load]
    per_repo: int  # ONLOOP_MAX_JOBS_PER_REPO
    running: int  # over the installations shown
    queued: int


def _counts(db: Database) -> dict[int | None, dict[str, int]]:
    """{installation id: {"running": n, "queued": n}} from one grouped query."""
    query = (
        select(Job.installation_id, Job.state, func.count())
        .where(Job.state.in_((JobState.RUNNING, JobState.QUEUED)))
        .group_by(Job.installation_id, Job.state)
    )
    counts: dict[int | None, dict[str, int]] = {}
    with db.read() as s:
        for installation, state, n in s.execute(query):
            into = counts.setdefault(installation, {"running": 0, "queued": 0})
            into["running" if state == JobState.RUNNING else "queued"] += int(n)
    return counts


def header(settings: Settings, db: Database, repos: Iterable[str] | None) -> Header:
    """The header for a person who may see `repos` (None: an operator, who sees all)."""
    shown = None if repos is None else {repo.lower() for repo in repos}
    owners = None if shown is None else {repo.split("/", 1)[0] for repo in shown}
    with db.read() as s:
        live = select(Installation.id, Installation.account_login).where(
            Installation.deleted_at.is_(None)
        )
        rows = list(s.execute(live))
    counts = _counts(db)
    accounts = {int(i): str(login) for i, login in rows}
    for installation in counts:
        if installation is not None:
            accounts.setdefault(installation, f"installation {installation}")
    stopped = pauses(db)
    held = {p.target: p.reason or "" for p in stopped if p.scope == INSTALLATION}
    paused_repos = sorted(p.target for p in stopped if p.scope == REPO)
    loads: list[Load] = []
    for installation, account in sorted(accounts.items(), key=lambda item: item[1].lower()):
        if owners is not None and account.lower() not in owners:
            continue
        mine = [r for r in paused_repos if r.split("/", 1)[0] == account.lower()]
        count = counts.get(installation, {"running": 0, "queued": 0})
        loads.append(
            Load(
                id=installation,
                account=account,
                paused=str(installation) in held,
                reason=held.get(str(installation), ""),
                paused_repos=[r for r in mine if shown is None or r in shown],
                running=count["running"],
                queued=count["queued"],
                cap=settings.max_jobs_per_installation,
            )
        )
    return Header(
        installations=loads,
        per_repo=settings.max_jobs_per_repo,
        running=sum(load.running for load in loads),
        queued=sum(load.queued for load in loads),
    )
