"""Record a verified delivery, its jobs and their outbox rows in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Protocol

from app.core.kinds import KINDS, Kinds, sandboxed
from app.intake.commands import CancelStale, Command, InstallationChange, RevokeAuthorization
from app.intake.decide import Action, Ignored, explain
from app.intake.events import Event
from app.intake.freshness import is_stale
from app.intake.insights import note
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config
from app.store.db import Database
from app.store.fastsql import Sql
from app.store.models import LIVE_STATES, JobState, utcnow

# Hand-written SQL for the hot path (see app.store.fastsql.Sql): `%s` a value, `%j` JSON text.
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
# The same with the delivery span's W3C traceparent, while traces are on (app.core.tracing).
TRACED_JOB = JOB.replace(" created_at)", " created_at, traceparent)").replace(
    "%s, %s) ON", "%s, %s, %s) ON"
)
LIVE_JOB = "SELECT id FROM jobs WHERE live_key = %s"
TRIGGER = (
    "INSERT INTO job_triggers (trigger_key, delivery_id, created_at) VALUES (%s, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING trigger_key"
)
REPEATED = "UPDATE deliveries SET outcome = %s WHERE id = %s"
ASKED_AGAIN = "SELECT 1 FROM redelivery_requests WHERE guid = %s"
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
INSTALLATION_GONE = "SELECT suspended, deleted_at FROM installations WHERE id = %s"
CANCEL_INSTALLATION = (
    "UPDATE jobs SET state = %s, live_key = NULL, finished_at = %s, result = %j"
    " WHERE installation_id = %s AND state IN (%s, %s, %s) RETURNING id"
)


def cancel_stale_sql(kinds: int, other_heads: bool) -> str:
    """Cancel a PR's live sandboxed jobs (`kinds` of them), or only those for other heads."""
    placeholders = ", ".join(["%s"] * kinds)  # only placeholders: the values are parameters
    statement = (
        "UPDATE jobs SET state = %s, live_key = NULL, finished_at = %s, result = %j"  # noqa: S608 - placeholders only
        " WHERE repo = %s AND number = %s AND state IN (%s, %s, %s)"
        f" AND kind IN ({placeholders})"
    )
    if other_heads:
        statement += " AND head_sha IS NOT NULL AND head_sha <> %s"
    return statement + " RETURNING id"


FORGET_USER = "DELETE FROM user_accounts WHERE id = %s"

assert len(LIVE_STATES) == 3, "see cancel_stale_sql"

Row = Sequence[Any]  # a row's values, as the driver decodes them


class Cursor(Protocol):
    """The DBAPI cursor calls intake makes (https://peps.python.org/pep-0249/#cursor-objects)."""

    def execute(self, operation: str, parameters: Sequence[object], /) -> object: ...

    def fetchone(self) -> Row | None: ...

    def fetchall(self) -> Sequence[Row]: ...


@dataclass
class IntakeResult:
    """What the webhook answers: 200 duplicate, 202 with jobs, 204 ignored, or 400 for
    work asked for in a malformed body (nothing recorded)."""

    status: int
    outcome: str
    job_ids: list[int] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)


@lru_cache(maxsize=1024)  # a pure parse of the text: bounded, it can never be stale
def _parsed_config(text: str | None, default_label: str) -> RepoConfig:
    """What `decide` sees. For an invalid file, the built-in defaults: not so that work runs
    under them (a worker refuses every job of a repository whose file is invalid, and says
    why on the thread), but so that a person's command still becomes a job that reads the
    file afresh: it tells them what is wrong, or, once the file is fixed, runs under it.
    Deciding on the strictest settings instead would answer nobody, and the cached text is
    only refreshed by a job."""
    try:
        config, _ = parse_repo_config(text)
    except ConfigError:
        return RepoConfig(fix_label=default_label)
    if text is None or "fix_label" not in text:
        config = config.model_copy(update={"fix_label": default_label})
    return config


def cached_config(sql: Sql, cur: Cursor, repo: str | None, default_label: str) -> RepoConfig:
    """The repository's config as last read by a worker; defaults when none was read yet."""
    text = None
    if repo:
        cur.execute(sql(CONFIG), (repo,))
        row = cur.fetchone()
        text = row[0] if row else None
    return _parsed_config(text, default_label)


def record(
    db: Database,
    event: Event,
    default_label: str,
    own_app_id: int | None = None,
    kinds: Kinds = KINDS,
    max_event_age: float | None = None,
    traceparent: str | None = None,
) -> IntakeResult:
    """Decide and record in one transaction, committed before this returns (group commit:
    concurrent requests share a transaction); the same GUID twice is one delivery. A comment
    or label older than `max_event_age` seconds makes no job (app.intake.freshness). The
    jobs it makes keep `traceparent`, the delivery's span, for the worker's spans."""
    work = partial(
        _record, db.sql, event, default_label, own_app_id, kinds, max_event_age, traceparent
    )
    try:
        return db.group_commit.run(work)
    except db.engine.dialect.loaded_dbapi.IntegrityError:
        return IntakeResult(200, Ignored.DUPLICATE)


def _record(
    sql: Sql,
    event: Event,
    default_label: str,
    own_app_id: int | None,
    kinds: Kinds,
    max_event_age: float | None,
    traceparent: str | None,
    cur: Cursor,
) -> IntakeResult:
    config = cached_config(sql, cur, event.repo, default_label)
    decision: Action | Ignored = explain(event, config, own_app_id, kinds)
    if event.problems and not isinstance(decision, Ignored):
        # Work from a body with fields of the wrong type or beyond what onloop stores would
        # run on a guess: refused, and nothing recorded. An ignored one is recorded (204).
        return IntakeResult(400, "malformed payload: " + "; ".join(event.problems[:5]))
    if isinstance(decision, Command) and max_event_age is not None:
        if is_stale(event, utcnow(), max_event_age) and not _asked_again(sql, cur, event):
            decision = Ignored.STALE_EVENT
    if isinstance(decision, Command):
        decision = _unless_gone(sql, cur, decision)
    outcome: str
    if isinstance(decision, Ignored):
        outcome = decision
    elif isinstance(decision, Command):
        outcome = decision.kind
    else:
        outcome = type(decision).__name__
    sender = event.sender.get("login", "")[:100] or None
    values = (event.delivery_guid, event.name, event.action, event.installation_id, event.repo)
    cur.execute(sql(DELIVERY), (*values, sender, outcome[:200], sql.ts(utcnow())))
    rows = cur.fetchall()
    if not rows:
        return IntakeResult(200, Ignored.DUPLICATE)  # this request has written nothing
    delivery_row_id = int(rows[0][0])
    note(sql, cur, event)  # onloop's pull requests, for /insights
    if isinstance(decision, Command) and not _first_trigger(sql, cur, decision, delivery_row_id):
        cur.execute(sql(REPEATED), (Ignored.REPEATED_TRIGGER, delivery_row_id))
        return IntakeResult(200, Ignored.REPEATED_TRIGGER)
    return _apply(sql, cur, decision, delivery_row_id, kinds, traceparent)


def _first_trigger(sql: Sql, cur: Cursor, command: Command, delivery_row_id: int) -> bool:
    """Whether this is the first delivery of the command's comment or label (its trigger key
    is claimed in this transaction, so concurrent deliveries of it claim it once)."""
    if command.trigger is None:
        return True
    cur.execute(sql(TRIGGER), (command.trigger, delivery_row_id, sql.ts(utcnow())))
    return bool(cur.fetchall())


def _asked_again(sql: Sql, cur: Cursor, event: Event) -> bool:
    """Whether onloop itself asked GitHub to redeliver this GUID (tasks.queue.redeliver): a
    redelivery after an outage is old but wanted; a captured body under a new GUID is not."""
    cur.execute(sql(ASKED_AGAIN), (event.delivery_guid,))
    return cur.fetchone() is not None


def _apply(
    sql: Sql,
    cur: Cursor,
    decision: Action | Ignored,
    delivery_row_id: int,
    kinds: Kinds,
    traceparent: str | None,
) -> IntakeResult:
    if isinstance(decision, Ignored):
        return IntakeResult(204, decision)
    if isinstance(decision, CancelStale):
        ids = _cancel_stale(sql, cur, decision, sandboxed(kinds))
        return IntakeResult(202, f"cancelled {len(ids)} stale job(s)", cancelled=ids)
    if isinstance(decision, InstallationChange):
        ids = _installation(sql, cur, decision)
        return IntakeResult(202, f"installation {decision.action}", cancelled=ids)
    if isinstance(decision, RevokeAuthorization):  # forget the person's tokens
        cur.execute(sql(FORGET_USER), (decision.user_id,))
        return IntakeResult(202, "authorization revoked")
    result = IntakeResult(202, decision.kind)
    for number in decision.numbers or (None,):
        job_id, created = _enqueue(sql, cur, decision, number, delivery_row_id, kinds, traceparent)
        result.job_ids.append(job_id)
        if not created:
            result.joined.append(job_id)
    return result


def _enqueue(
    sql: Sql,
    cur: Cursor,
    command: Command,
    number: int | None,
    delivery_row_id: int,
    kinds: Kinds,
    traceparent: str | None = None,
) -> tuple[int, bool]:
    """Create the job (and its outbox row) unless a live one with its key exists, which it
    joins; returns (id, created). Only the same person's repeat, or another failed run of an
    automatic CI fix, has the same key (`Command.live_key` says why)."""
    key = command.live_key(number, kinds)
    now = sql.ts(utcnow())
    values: tuple[object, ...] = (
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
        delivery_row_id,
        now,
    )
    statement = JOB
    if traceparent is not None:
        statement, values = TRACED_JOB, (*values, traceparent)
    for _ in range(3):  # the live job can finish between the insert and the look-up
        cur.execute(sql(statement), values)
        rows = cur.fetchall()
        if rows:
            cur.execute(sql(OUTBOX), (rows[0][0], now))
            return int(rows[0][0]), True
        cur.execute(sql(LIVE_JOB), (key,))
        existing = cur.fetchone()
        if existing is not None:  # a live job with this key exists: join it
            return int(existing[0]), False
    raise RuntimeError(f"could not create or join the live job {key}")


def _cancel_stale(sql: Sql, cur: Cursor, change: CancelStale, kinds: tuple[str, ...]) -> list[int]:
    params: tuple[object, ...] = (JobState.CANCELLED, sql.ts(utcnow()))
    params += (sql.json({"reason": change.reason}), change.repo, change.number)
    params += (*LIVE_STATES, *kinds)
    if change.head_sha is None:
        cur.execute(sql(cancel_stale_sql(len(kinds), other_heads=False)), params)
    else:  # jobs still without a head resolve it when they start, so they are not stale
        cur.execute(sql(cancel_stale_sql(len(kinds), other_heads=True)), (*params, change.head_sha))
    return sorted(int(row[0]) for row in cur.fetchall())


def _unless_gone(sql: Sql, cur: Cursor, command: Command) -> Command | Ignored:
    """The command, or why not: a deleted or suspended installation can mint no token."""
    if command.installation_id is None:
        return command
    cur.execute(sql(INSTALLATION_GONE), (command.installation_id,))
    row = cur.fetchone()
    if row is not None and row[1] is not None:
        return Ignored.UNINSTALLED
    if row is not None and row[0]:
        return Ignored.SUSPENDED
    return command


def _installation(sql: Sql, cur: Cursor, change: InstallationChange) -> list[int]:
    """Keep the installation's row; deleted or suspended, its live jobs are cancelled."""
    cur.execute(sql(INSTALLATION), (change.installation_id,))
    row = cur.fetchone()
    old = set(sql.loads(row[0]) or []) if row is not None else set()
    repos = ((set() if change.action == "created" else old) | set(change.repositories)) - set(
        change.removed
    )
    suspended = change.action == "suspend" or (
        row is not None and bool(row[1]) and change.action not in ("unsuspend", "created")
    )
    now = utcnow()
    deleted_at = sql.ts(now) if change.action == "deleted" else None
    values = (change.account_login, change.account_type, sql.json(sorted(repos)), suspended)
    statement = NEW_INSTALLATION if row is None else SET_INSTALLATION
    cur.execute(sql(statement), (*values, deleted_at, sql.ts(now), change.installation_id))
    if change.action not in ("deleted", "suspend"):
        return []
    # Their sandboxes stop through the cancel watch; no comment says so, as the App can no
    # longer post one: the reason stays in the job's result.
    what = "uninstalled" if change.action == "deleted" else "suspended"
    reason = {"reason": f"onloop was {what} on {change.account_login}"}
    params = (JobState.CANCELLED, sql.ts(now), sql.json(reason), change.installation_id)
    cur.execute(sql(CANCEL_INSTALLATION), (*params, *LIVE_STATES))
    return sorted(int(r[0]) for r in cur.fetchall())
