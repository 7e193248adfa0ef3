"""Record a verified delivery, its jobs and their outbox rows in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from app.commands import CancelStale, Command, InstallationChange, Kind, RevokeAuthorization
from app.db import Database
from app.decide import Action, explain
from app.events import Event
from app.fastsql import Sql
from app.models import JobState, utcnow
from app.repo_config import ConfigError, RepoConfig, parse_repo_config

# Hand-written SQL for the hot path (see app.fastsql.Sql): `%s` a value, `%j` JSON text.
CONFIG = "SELECT text FROM repo_configs WHERE repo = %s"
DELIVERY = (
    "INSERT INTO deliveries (guid, event, action, installation_id, repo, sender, outcome,"
    " received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id"
)
JOB = (
    "INSERT INTO jobs (kind, repo, repo_id, installation_id, number, head_sha, requested_by,"
    " requested_by_id, state, live_key, params, attempts, steps, result, delivery_id,"
    " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %j, 0, %j, %j, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING id"
)
LIVE_JOB = "SELECT id FROM jobs WHERE live_key = %s"
OUTBOX = "INSERT INTO outbox (job_id, created_at, publish_attempts) VALUES (%s, %s, 0)"
INSTALLATION = "SELECT repositories, suspended FROM installations WHERE id = %s"
NEW_INSTALLATION = (
    "INSERT INTO installations (account_login, account_type, repositories, suspended,"
    " deleted_at, updated_at, id) VALUES (%s, %s, %j, %s, %s, %s, %s)"
)
SET_INSTALLATION = (
    "UPDATE installations SET account_login = %s, account_type = %s, repositories = %j,"
    " suspended = %s, deleted_at = %s, updated_at = %s WHERE id = %s"
)
CANCEL_STALE = (
    "UPDATE jobs SET state = %s, live_key = NULL, finished_at = %s, result = %j"
    " WHERE repo = %s AND number = %s AND state IN (%s, %s, %s) AND kind IN (%s, %s, %s, %s)"
)
CANCEL_OTHER_HEADS = CANCEL_STALE + " AND head_sha IS NOT NULL AND head_sha <> %s RETURNING id"
CANCEL_STALE += " RETURNING id"
FORGET_USER = "DELETE FROM user_accounts WHERE id = %s"

assert len(JobState.LIVE) == 3 and len(Kind.SANDBOXED) == 4, "see CANCEL_STALE"


@dataclass
class IntakeResult:
    """What the webhook answers: 200 duplicate, 202 with jobs, or 204 ignored."""

    status: int
    outcome: str
    job_ids: list[int] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)


DUPLICATE = "duplicate delivery"


@cache
def _parsed_config(text: str | None, default_label: str) -> RepoConfig:
    try:
        config, _ = parse_repo_config(text)
    except ConfigError:
        config = RepoConfig()
    if text is None or "fix_label" not in text:
        config = config.model_copy(update={"fix_label": default_label})
    return config


def cached_config(sql: Sql, cur: Any, repo: str | None, default_label: str) -> RepoConfig:
    """The repository's config as last read by a worker; defaults when none was read yet."""
    text = None
    if repo:
        cur.execute(sql(CONFIG), (repo,))
        row = cur.fetchone()
        text = row[0] if row else None
    return _parsed_config(text, default_label)


def record(
    db: Database, event: Event, default_label: str, own_app_id: int | None = None
) -> IntakeResult:
    """Decide and record in one transaction, committed before this returns (group commit:
    concurrent requests share a transaction); the same GUID twice is one delivery."""
    try:
        return db.group_commit.run(partial(_record, db.sql, event, default_label, own_app_id))
    except db.engine.dialect.loaded_dbapi.IntegrityError:
        return IntakeResult(200, DUPLICATE)


def _record(
    sql: Sql, event: Event, default_label: str, own_app_id: int | None, cur: Any
) -> IntakeResult:
    config = cached_config(sql, cur, event.repo, default_label)
    decision: Action | str = explain(event, config, own_app_id)
    if isinstance(decision, str):
        outcome = decision
    elif isinstance(decision, Command):
        outcome = decision.kind
    else:
        outcome = type(decision).__name__
    sender = str(event.sender.get("login", ""))[:100] or None
    values = (event.delivery_id, event.name, event.action, event.installation_id, event.repo)
    cur.execute(sql(DELIVERY), (*values, sender, outcome[:200], sql.ts(utcnow())))
    rows = cur.fetchall()
    if not rows:
        return IntakeResult(200, DUPLICATE)  # this request has written nothing
    return _apply(sql, cur, decision, int(rows[0][0]))


def _apply(sql: Sql, cur: Any, decision: Action | str, delivery_id: int) -> IntakeResult:
    if isinstance(decision, str):
        return IntakeResult(204, decision)
    if isinstance(decision, CancelStale):
        ids = _cancel_stale(sql, cur, decision)
        return IntakeResult(202, f"cancelled {len(ids)} stale job(s)", cancelled=ids)
    if isinstance(decision, InstallationChange):
        _installation(sql, cur, decision)
        return IntakeResult(202, f"installation {decision.action}")
    if isinstance(decision, RevokeAuthorization):  # forget the person's tokens
        cur.execute(sql(FORGET_USER), (decision.user_id,))
        return IntakeResult(202, "authorization revoked")
    result = IntakeResult(202, decision.kind)
    for number in decision.numbers or (None,):
        job_id, created = _enqueue(sql, cur, decision, number, delivery_id)
        result.job_ids.append(job_id)
        if not created:
            result.joined.append(job_id)
    return result


def _enqueue(
    sql: Sql, cur: Any, command: Command, number: int | None, delivery_id: int
) -> tuple[int, bool]:
    """Create the job (and its outbox row) unless a live one exists; returns (id, created)."""
    key = command.live_key(number)
    now = sql.ts(utcnow())
    values = (
        command.kind,
        command.repo,
        command.repo_id,
        command.installation_id,
        number,
        command.head_sha,
        command.requested_by,
        command.requested_by_id,
        JobState.QUEUED,
        key,
        sql.json(command.to_params()),
        "[]",
        "{}",
        delivery_id,
        now,
    )
    for _ in range(3):  # the live job can finish between the insert and the look-up
        cur.execute(sql(JOB), values)
        rows = cur.fetchall()
        if rows:
            cur.execute(sql(OUTBOX), (rows[0][0], now))
            return int(rows[0][0]), True
        cur.execute(sql(LIVE_JOB), (key,))
        existing = cur.fetchone()
        if existing is not None:  # a live job with this key exists: join it
            return int(existing[0]), False
    raise RuntimeError(f"could not create or join the live job {key}")


def _cancel_stale(sql: Sql, cur: Any, change: CancelStale) -> list[int]:
    params: tuple[Any, ...] = (JobState.CANCELLED, sql.ts(utcnow()))
    params += (sql.json({"reason": change.reason}), change.repo, change.number)
    params += (*JobState.LIVE, *Kind.SANDBOXED)
    if change.head_sha is None:
        cur.execute(sql(CANCEL_STALE), params)
    else:  # jobs still without a head resolve it when they start, so they are not stale
        cur.execute(sql(CANCEL_OTHER_HEADS), (*params, change.head_sha))
    return sorted(int(row[0]) for row in cur.fetchall())


def _installation(sql: Sql, cur: Any, change: InstallationChange) -> None:
    cur.execute(sql(INSTALLATION), (change.installation_id,))
    row = cur.fetchone()
    old = set(sql.loads(row[0]) or []) if row is not None else set()
    repos = ((set() if change.action == "created" else old) | set(change.repositories)) - set(
        change.removed
    )
    suspended = change.action == "suspend" or (
        row is not None and bool(row[1]) and change.action != "unsuspend"
    )
    now = utcnow()
    deleted_at = sql.ts(now) if change.action == "deleted" else None
    values = (change.account_login, change.account_type, sql.json(sorted(repos)), suspended)
    statement = NEW_INSTALLATION if row is None else SET_INSTALLATION
    cur.execute(sql(statement), (*values, deleted_at, sql.ts(now), change.installation_id))
