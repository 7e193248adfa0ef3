"""Record a verified delivery, its jobs and their outbox rows in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Connection, Insert, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from app.commands import CancelStale, Command, InstallationChange, Kind
from app.db import Database
from app.decide import Action, explain
from app.events import Event
from app.models import Delivery, Installation, Job, JobState, Outbox, RepoConfigCache, utcnow
from app.repo_config import ConfigError, RepoConfig, parse_repo_config


@dataclass
class IntakeResult:
    """What the webhook answers: 200 duplicate, 202 with jobs, or 204 ignored."""

    status: int
    outcome: str
    job_ids: list[int] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)


@cache
def _insert_new(dialect: str, table_name: str) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING id, built once per dialect and table."""
    model: type[Delivery] | type[Job] = Delivery if table_name == "deliveries" else Job
    make = postgresql_insert if dialect == "postgresql" else sqlite_insert
    stmt: Insert = make(model).on_conflict_do_nothing().returning(model.id)
    return stmt


@cache
def _parsed_config(text: str | None, default_label: str) -> RepoConfig:
    try:
        config, _ = parse_repo_config(text)
    except ConfigError:
        config = RepoConfig()
    if text is None or "fix_label" not in text:
        config = config.model_copy(update={"fix_label": default_label})
    return config


def cached_config(conn: Connection, repo: str | None, default_label: str) -> RepoConfig:
    """The repository's config as last read by a worker; defaults when none was read yet."""
    text = None
    if repo:
        text = conn.execute(
            select(RepoConfigCache.text).where(RepoConfigCache.repo == repo)
        ).scalar()
    return _parsed_config(text, default_label)


def _enqueue(
    conn: Connection, command: Command, number: int | None, delivery_id: int
) -> tuple[int, bool]:
    """Create the job (and its outbox row) unless a live one exists; returns (id, created)."""
    key = command.live_key(number)
    now = utcnow()
    values: dict[str, Any] = {
        "kind": command.kind,
        "repo": command.repo,
        "repo_id": command.repo_id,
        "installation_id": command.installation_id,
        "number": number,
        "head_sha": command.head_sha,
        "requested_by": command.requested_by,
        "requested_by_id": command.requested_by_id,
        "state": JobState.QUEUED,
        "live_key": key,
        "params": command.to_params(),
        "attempts": 0,
        "steps": [],
        "result": {},
        "delivery_id": delivery_id,
        "created_at": now,
    }
    job_id = conn.execute(_insert_new(conn.dialect.name, "jobs"), values).scalar()
    if job_id is None:  # a live job with this key exists: join it
        existing = conn.execute(select(Job.id).where(Job.live_key == key)).scalar()
        assert existing is not None
        return int(existing), False
    conn.execute(insert(Outbox), {"job_id": job_id, "created_at": now, "publish_attempts": 0})
    return int(job_id), True


def _cancel_stale(conn: Connection, change: CancelStale) -> list[int]:
    conditions = [
        Job.repo == change.repo,
        Job.number == change.number,
        Job.state.in_(JobState.LIVE),
        Job.kind.in_(Kind.SANDBOXED),
    ]
    if change.head_sha is not None:
        # Jobs still without a head resolve it when they start, so they are not stale.
        conditions += [Job.head_sha.is_not(None), Job.head_sha != change.head_sha]
    ids = [int(i) for i in conn.execute(select(Job.id).where(*conditions)).scalars()]
    if ids:
        conn.execute(
            update(Job)
            .where(Job.id.in_(ids))
            .values(
                state=JobState.CANCELLED,
                live_key=None,
                finished_at=utcnow(),
                result={"reason": change.reason},
            )
        )
    return ids


def _installation(conn: Connection, change: InstallationChange) -> None:
    row = conn.execute(
        select(Installation.repositories, Installation.suspended).where(
            Installation.id == change.installation_id
        )
    ).first()
    repos = set(row.repositories or []) if row is not None and change.action != "created" else set()
    repos = (repos | set(change.repositories)) - set(change.removed)
    suspended = change.action == "suspend" or (
        row is not None and row.suspended and change.action != "unsuspend"
    )
    values = {
        "account_login": change.account_login,
        "account_type": change.account_type,
        "repositories": sorted(repos),
        "suspended": suspended,
        "deleted_at": utcnow() if change.action == "deleted" else None,
        "updated_at": utcnow(),
    }
    if row is None:
        conn.execute(insert(Installation), {"id": change.installation_id, **values})
    else:
        conn.execute(
            update(Installation).where(Installation.id == change.installation_id).values(values)
        )


def record(db: Database, event: Event, default_label: str) -> IntakeResult:
    """Decide and record in one transaction; the same GUID twice is one delivery."""
    with db.engine.connect() as conn:
        config = cached_config(conn, event.repo, default_label)
        conn.rollback()  # end the read: a SQLite read turning into a write can fail at once
        decision: Action | str = explain(event, config)
        if isinstance(decision, str):
            outcome = decision
        elif isinstance(decision, Command):
            outcome = decision.kind
        else:
            outcome = type(decision).__name__
        with db.write_lock():
            return _record(conn, event, decision, outcome)


def _record(conn: Connection, event: Event, decision: Action | str, outcome: str) -> IntakeResult:
    delivery_id = conn.execute(
        _insert_new(conn.dialect.name, "deliveries"),
        {
            "guid": event.delivery_id,
            "event": event.name,
            "action": event.action,
            "installation_id": event.installation_id,
            "repo": event.repo,
            "sender": str(event.sender.get("login", ""))[:100] or None,
            "outcome": outcome[:200],
            "received_at": utcnow(),
        },
    ).scalar()
    if delivery_id is None:
        conn.rollback()
        return IntakeResult(200, "duplicate delivery")
    result = _apply(conn, decision, int(delivery_id))
    try:
        conn.commit()
    except IntegrityError:
        conn.rollback()
        return IntakeResult(200, "duplicate delivery")
    return result


def _apply(conn: Connection, decision: Action | str, delivery_id: int) -> IntakeResult:
    if isinstance(decision, str):
        return IntakeResult(204, decision)
    if isinstance(decision, CancelStale):
        ids = _cancel_stale(conn, decision)
        return IntakeResult(202, f"cancelled {len(ids)} stale job(s)", cancelled=ids)
    if isinstance(decision, InstallationChange):
        _installation(conn, decision)
        return IntakeResult(202, f"installation {decision.action}")
    result = IntakeResult(202, decision.kind)
    for number in decision.numbers or (None,):
        job_id, created = _enqueue(conn, decision, number, delivery_id)
        result.job_ids.append(job_id)
        if not created:
            result.joined.append(job_id)
    return result
