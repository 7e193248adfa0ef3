"""Record a verified delivery, its jobs and their outbox rows in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, Protocol

from app.core.kinds import KINDS, Kinds, sandboxed
from app.intake.commands import CancelStale, Command, InstallationChange, RevokeAuthorization
from app.intake.config_push import mark_stale
from app.intake.decide import Action, Ignored, explain
from app.intake.events import Event
from app.intake.freshness import is_stale
from app.intake.insights import note
from app.intake.statements import (
    ASKED_AGAIN,
    CANCEL_INSTALLATION,
    DELIVERY,
    DELIVERY_AND_TRIGGER,
    FORGET_USER,
    INSTALLATION,
    JOB,
    JOB_AND_OUTBOX,
    LIVE_JOB,
    LOOKUP,
    NEW_INSTALLATION,
    OUTBOX,
    REPEATED,
    SET_INSTALLATION,
    TRACED_JOB,
    TRACED_JOB_AND_OUTBOX,
    TRIGGER,
    cancel_stale_sql,
)
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config
from app.store.db import Database
from app.store.fastsql import Sql
from app.store.models import LIVE_STATES, JobState, utcnow

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


def _lookup(sql: Sql, cur: Cursor, event: Event) -> Row:
    """(config text, suspended, deleted_at): the repository's config as last read by a
    worker (None when none was read yet) and its installation's state (None without a row)."""
    cur.execute(sql(LOOKUP), (event.repo, event.installation_id, event.installation_id))
    row = cur.fetchone()
    assert row is not None  # a SELECT of scalar subqueries answers one row
    return row


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
    looked_up = _lookup(sql, cur, event)
    config = _parsed_config(looked_up[0], default_label)
    decision: Action | Ignored = explain(event, config, own_app_id, kinds)
    if event.problems and not isinstance(decision, Ignored):
        # Work from a body with fields of the wrong type or beyond what onloop stores would
        # run on a guess: refused, and nothing recorded. An ignored one is recorded (204).
        return IntakeResult(400, "malformed payload: " + "; ".join(event.problems[:5]))
    if isinstance(decision, Command) and max_event_age is not None:
        if is_stale(event, utcnow(), max_event_age) and not _asked_again(sql, cur, event):
            decision = Ignored.STALE_EVENT
    if isinstance(decision, Command):
        decision = _unless_gone(decision, suspended=looked_up[1], deleted_at=looked_up[2])
    outcome: str
    if isinstance(decision, Ignored):
        outcome = decision
    elif isinstance(decision, Command):
        outcome = decision.kind
    else:
        outcome = type(decision).__name__
    sender = event.sender.get("login", "")[:100] or None
    values: tuple[object, ...] = (event.delivery_guid, event.name, event.action)
    values += (event.installation_id, event.repo, sender, outcome[:200], sql.ts(utcnow()))
    trigger = decision.trigger if isinstance(decision, Command) else None
    if trigger is not None and not sql.sqlite:  # one round trip for both
        cur.execute(sql(DELIVERY_AND_TRIGGER), (*values, trigger, sql.ts(utcnow())))
    else:
        cur.execute(sql(DELIVERY), values)
    rows = cur.fetchall()
    if not rows:
        return IntakeResult(200, Ignored.DUPLICATE)  # this request has written nothing
    delivery_row_id = int(rows[0][0])
    note(sql, cur, event)  # onloop's pull requests, for /insights
    mark_stale(sql, cur, event)  # a push to the default branch: beat's schedules read it again
    if trigger is not None and not sql.sqlite:
        first = bool(rows[0][1])
    else:
        first = not isinstance(decision, Command) or _first_trigger(sql, cur, decision, rows[0])
    if not first:
        cur.execute(sql(REPEATED), (Ignored.REPEATED_TRIGGER, delivery_row_id))
        return IntakeResult(200, Ignored.REPEATED_TRIGGER)
    return _apply(sql, cur, decision, delivery_row_id, kinds, traceparent)


def _first_trigger(sql: Sql, cur: Cursor, command: Command, delivery: Row) -> bool:
    """Whether this is the first delivery of the command's comment or label (its trigger key
    is claimed in this transaction, so concurrent deliveries of it claim it once)."""
    if command.trigger is None:
        return True
    cur.execute(sql(TRIGGER), (command.trigger, int(delivery[0]), sql.ts(utcnow())))
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
    traced = traceparent is not None  # the delivery span's context, while traces are on
    if traced:
        values = (*values, traceparent)
    for _ in range(3):  # the live job can finish between the insert and the look-up
        if sql.sqlite:
            cur.execute(sql(TRACED_JOB if traced else JOB), values)
        else:  # the outbox row in the same round trip
            statement = TRACED_JOB_AND_OUTBOX if traced else JOB_AND_OUTBOX
            cur.execute(sql(statement), (*values, now))
        rows = cur.fetchall()
        if rows:
            if sql.sqlite:
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


def _unless_gone(command: Command, suspended: object, deleted_at: object) -> Command | Ignored:
    """The command, or why not: a deleted or suspended installation can mint no token."""
    if command.installation_id is None:
        return command
    if deleted_at is not None:
        return Ignored.UNINSTALLED
    if suspended:
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
