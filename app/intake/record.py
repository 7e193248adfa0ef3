"""Record a verified delivery, its jobs and their outbox rows in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache, partial

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
    DELIVERY_TO_JOB,
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
    TRACED_DELIVERY_TO_JOB,
    TRACED_JOB,
    TRACED_JOB_AND_OUTBOX,
    TRIGGER,
    cancel_stale_sql,
)
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config
from app.store.db import Database
from app.store.fastsql import Row, Sql, Steps
from app.store.models import LIVE_STATES, JobState, utcnow


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


def _lookup(sql: Sql, event: Event) -> Steps[Row]:
    """(config text, suspended, deleted_at): the repository's config as last read by a
    worker (None when none was read yet) and its installation's state (None without a row)."""
    rows = yield sql(LOOKUP), (event.repo, event.installation_id, event.installation_id)
    return rows[0]  # a SELECT of scalar subqueries answers one row


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
) -> Steps[IntakeResult]:
    looked_up = yield from _lookup(sql, event)
    config = _parsed_config(looked_up[0], default_label)
    decision: Action | Ignored = explain(event, config, own_app_id, kinds)
    if event.problems and not isinstance(decision, Ignored):
        # Work from a body with fields of the wrong type or beyond what onloop stores would
        # run on a guess: refused, and nothing recorded. An ignored one is recorded (204).
        return IntakeResult(400, "malformed payload: " + "; ".join(event.problems[:5]))
    if isinstance(decision, Command) and max_event_age is not None:
        if is_stale(event, utcnow(), max_event_age) and not (yield from _asked_again(sql, event)):
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
    one_job = isinstance(decision, Command) and len(decision.numbers) <= 1
    if trigger is not None and not sql.sqlite and one_job:  # a person's command: one statement
        assert isinstance(decision, Command)
        number = decision.numbers[0] if decision.numbers else None
        _, job, now = _job_values(sql, decision, number, kinds)
        job += (now, traceparent) if traceparent is not None else (now,)
        statement = DELIVERY_TO_JOB if traceparent is None else TRACED_DELIVERY_TO_JOB
        rows = yield sql(statement), (*values, trigger, now, *job, now)
    elif trigger is not None and not sql.sqlite:  # one statement for both
        rows = yield sql(DELIVERY_AND_TRIGGER), (*values, trigger, sql.ts(utcnow()))
    else:
        rows = yield sql(DELIVERY), values
    if not rows:
        return IntakeResult(200, Ignored.DUPLICATE)  # this request has written nothing
    delivery_row_id = int(rows[0][0])
    yield from note(sql, event)  # onloop's pull requests, for /insights
    yield from mark_stale(sql, event)  # a push to the default branch: beat reads it again
    if trigger is not None and not sql.sqlite:
        first = bool(rows[0][1])
    elif isinstance(decision, Command):
        first = yield from _first_trigger(sql, decision, rows[0])
    else:
        first = True
    if not first:
        yield sql(REPEATED), (Ignored.REPEATED_TRIGGER, delivery_row_id)
        return IntakeResult(200, Ignored.REPEATED_TRIGGER)
    if one_job and not sql.sqlite and len(rows[0]) > 2 and rows[0][2] is not None:
        assert isinstance(decision, Command)  # its job, made in the same statement
        return IntakeResult(202, decision.kind, job_ids=[int(rows[0][2])])
    # (A live job with the command's key, which it joins.)
    return (yield from _apply(sql, decision, delivery_row_id, kinds, traceparent))


def _first_trigger(sql: Sql, command: Command, delivery: Row) -> Steps[bool]:
    """Whether this is the first delivery of the command's comment or label (its trigger key
    is claimed in this transaction, so concurrent deliveries of it claim it once)."""
    if command.trigger is None:
        return True
    rows = yield sql(TRIGGER), (command.trigger, int(delivery[0]), sql.ts(utcnow()))
    return bool(rows)


def _asked_again(sql: Sql, event: Event) -> Steps[bool]:
    """Whether onloop itself asked GitHub to redeliver this GUID (tasks.queue.redeliver): a
    redelivery after an outage is old but wanted; a captured body under a new GUID is not."""
    rows = yield sql(ASKED_AGAIN), (event.delivery_guid,)
    return bool(rows)


def _apply(
    sql: Sql,
    decision: Action | Ignored,
    delivery_row_id: int,
    kinds: Kinds,
    traceparent: str | None,
) -> Steps[IntakeResult]:
    if isinstance(decision, Ignored):
        return IntakeResult(204, decision)
    if isinstance(decision, CancelStale):
        ids = yield from _cancel_stale(sql, decision, sandboxed(kinds))
        return IntakeResult(202, f"cancelled {len(ids)} stale job(s)", cancelled=ids)
    if isinstance(decision, InstallationChange):
        ids = yield from _installation(sql, decision)
        return IntakeResult(202, f"installation {decision.action}", cancelled=ids)
    if isinstance(decision, RevokeAuthorization):  # forget the person's tokens
        yield sql(FORGET_USER), (decision.user_id,)
        return IntakeResult(202, "authorization revoked")
    result = IntakeResult(202, decision.kind)
    for number in decision.numbers or (None,):
        job_id, created = yield from _enqueue(
            sql, decision, number, delivery_row_id, kinds, traceparent
        )
        result.job_ids.append(job_id)
        if not created:
            result.joined.append(job_id)
    return result


def _enqueue(
    sql: Sql,
    command: Command,
    number: int | None,
    delivery_row_id: int,
    kinds: Kinds,
    traceparent: str | None = None,
) -> Steps[tuple[int, bool]]:
    """Create the job (and its outbox row) unless a live one with its key exists, which it
    joins; returns (id, created). Only the same person's repeat, or another failed run of an
    automatic CI fix, has the same key (`Command.live_key` says why)."""
    key, values, now = _job_values(sql, command, number, kinds)
    traced = traceparent is not None  # the delivery span's context, while traces are on
    values = (*values, delivery_row_id, now, *((traceparent,) if traced else ()))
    for _ in range(3):  # the live job can finish between the insert and the look-up
        if sql.sqlite:
            rows = yield sql(TRACED_JOB if traced else JOB), values
        else:  # the outbox row in the same statement
            statement = TRACED_JOB_AND_OUTBOX if traced else JOB_AND_OUTBOX
            rows = yield sql(statement), (*values, now)
        if rows:
            if sql.sqlite:
                yield sql(OUTBOX), (rows[0][0], now)
            return int(rows[0][0]), True
        existing = yield sql(LIVE_JOB), (key,)
        if existing:  # a live job with this key exists: join it
            return int(existing[0][0]), False
    raise RuntimeError(f"could not create or join the live job {key}")


def _job_values(
    sql: Sql, command: Command, number: int | None, kinds: Kinds
) -> tuple[str, tuple[object, ...], object]:
    """The job's live key, its values from `kind` to `result` (as JOB lists them), and now."""
    key = command.live_key(number, kinds)
    values: tuple[object, ...] = (command.kind, command.repo, command.repo_id)
    values += (command.installation_id, number)
    values += (command.head_sha, command.requested_by, command.requested_by_id)
    values += (JobState.QUEUED, key, sql.json(command.to_params()), "[]", "{}")
    return key, values, sql.ts(utcnow())


def _cancel_stale(sql: Sql, change: CancelStale, kinds: tuple[str, ...]) -> Steps[list[int]]:
    params: tuple[object, ...] = (JobState.CANCELLED, sql.ts(utcnow()))
    params += (sql.json({"reason": change.reason}), change.repo, change.number)
    params += (*LIVE_STATES, *kinds)
    if change.head_sha is None:
        rows = yield sql(cancel_stale_sql(len(kinds), other_heads=False)), params
    else:  # jobs still without a head resolve it when they start, so they are not stale
        statement = sql(cancel_stale_sql(len(kinds), other_heads=True))
        rows = yield statement, (*params, change.head_sha)
    return sorted(int(row[0]) for row in rows)


def _unless_gone(command: Command, suspended: object, deleted_at: object) -> Command | Ignored:
    """The command, or why not: a deleted or suspended installation can mint no token."""
    if command.installation_id is None:
        return command
    if deleted_at is not None:
        return Ignored.UNINSTALLED
    if suspended:
        return Ignored.SUSPENDED
    return command


def _installation(sql: Sql, change: InstallationChange) -> Steps[list[int]]:
    """Keep the installation's row; deleted or suspended, its live jobs are cancelled."""
    found = yield sql(INSTALLATION), (change.installation_id,)
    row = found[0] if found else None
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
    yield sql(statement), (*values, deleted_at, sql.ts(now), change.installation_id)
    if change.action not in ("deleted", "suspend"):
        return []
    # Their sandboxes stop through the cancel watch; no comment says so, as the App can no
    # longer post one: the reason stays in the job's result.
    what = "uninstalled" if change.action == "deleted" else "suspended"
    reason = {"reason": f"onloop was {what} on {change.account_login}"}
    params = (JobState.CANCELLED, sql.ts(now), sql.json(reason), change.installation_id)
    rows = yield sql(CANCEL_INSTALLATION), (*params, *LIVE_STATES)
    return sorted(int(r[0]) for r in rows)
