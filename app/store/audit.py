"""The audit log: every decision and action appended to `audit_log`, and never a token value."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select

from app.store.db import Database
from app.store.models import AuditEntry, aware

log = logging.getLogger("onloop.audit")

# Actions, one name each; `detail` carries the rest.
DELIVERY = "delivery"  # a webhook delivery and who sent it
POLICY = "policy"  # the verdict before any work: allowed, or the rule that refused
STEP = "step"  # a job step and its outcome
SANDBOX_EXEC = "sandbox.exec"  # a command in the sandbox and its exit code
GITHUB_WRITE = "github.write"  # a non-GET REST request: method, path, status
GIT_PUSH = "git.push"  # a push: ref, old and new sha
BLAST_RADIUS = "blast_radius"  # the diff check before a push, and its violations
JOB_FAILED = "job.failed"  # a job that ended failed, and why (its stored error)
LIMIT_WAIT = "limits.wait"  # a job held back by a concurrency cap or the start bucket
JOB_CANCEL = "job.cancel"  # a job cancelled from its page (who, and why)
CAMPAIGN_APPROVED = "campaign.approved"  # its owner started a picked-up campaign (its page)
SCHEDULE_APPROVED = "schedule.approved"  # its owner approved a schedule as it is (its page)
PAUSE = "pause"
RESUME = "resume"

REDACTED = "[redacted]"
# GitHub's token formats (https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/)
# and JWTs (app tokens).
_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9_]{8,}|github_pat_[A-Za-z0-9_]{8,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)"
)
_SECRET_KEYS = re.compile(r"token|secret|password|authorization|private_key|credential", re.I)
_SIZES = {"action": 64, "actor": 100, "repo": 200, "delivery_guid": 64, "identity": 100}
_SIZES["token_kind"] = 20


def redact(value: Any) -> Any:
    """`value` as JSON-able data with anything that looks like a token replaced, and the values
    of keys that name secrets (token, password, ...) dropped; `token_kind` is kept."""
    if isinstance(value, str):
        return _TOKEN.sub(REDACTED, value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            secret = _SECRET_KEYS.search(name) and name != "token_kind"
            out[redact(name)] = REDACTED if secret and item not in (None, "") else redact(item)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value))


def _clip(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return str(redact(str(value)))[: _SIZES[name]]


def record(db: Database, action: str, *, repo: str | None, **fields: Any) -> None:
    """Append one entry (fields as `make_entry`). Nothing here updates or deletes an entry;
    the database refuses to."""
    entry = make_entry(action, repo=repo, **fields)
    with db.transaction() as s:
        s.add(entry)


def make_entry(
    action: str,
    *,
    repo: str | None,
    job_id: int | None = None,
    delivery_guid: str | None = None,
    actor: str | None = None,
    detail: dict[str, Any] | None = None,
    token_kind: str | None = None,
    identity: str | None = None,
) -> AuditEntry:
    """An entry, redacted and clipped to its columns, to add to a session of one's own (the
    webhook intake adds it in the delivery's transaction)."""
    return AuditEntry(
        action=_clip("action", action) or action,
        repo=_clip("repo", repo),
        job_id=job_id,
        delivery_guid=_clip("delivery_guid", delivery_guid),
        actor=_clip("actor", actor),
        detail=redact(dict(detail or {})),
        token_kind=_clip("token_kind", token_kind),
        identity=_clip("identity", identity),
    )


def record_push(
    db: Database,
    *,
    repo: str,
    job_id: int | None,
    ref: str,
    old: str | None,
    new: str,
    identity: str,
    token_kind: str = "user",  # noqa: S107 - a kind of token, not one
    via: str | None = None,
) -> None:
    """A push onloop made: the ref, the sha it replaced ("" or None: created) and the new sha;
    `via` names the API that made the commits when it was no git push (createCommitOnBranch,
    merge)."""
    detail = {"ref": ref, "old": old or None, "new": new}
    if via is not None:
        detail["via"] = via
    record(
        db,
        GIT_PUSH,
        repo=repo,
        job_id=job_id,
        detail=detail,
        token_kind=token_kind,
        identity=identity,
    )


def record_command(
    db: Database, *, repo: str, job_id: int | None, argv: Sequence[str], exit_code: int
) -> None:
    """A command run in the job's sandbox and its exit code."""
    detail = {"argv": [str(a) for a in argv][:50], "exit_code": int(exit_code)}
    record(db, SANDBOX_EXEC, repo=repo, job_id=job_id, detail=detail)


def entries(
    db: Database,
    *,
    repo: str | None = None,
    since: datetime | None = None,
    job_id: int | None = None,
    action: str | None = None,
    limit: int | None = None,
) -> list[AuditEntry]:
    """Entries oldest first, filtered by repository, time, job and action."""
    query = select(AuditEntry).order_by(AuditEntry.id)
    if repo is not None:
        query = query.where(AuditEntry.repo == repo)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if job_id is not None:
        query = query.where(AuditEntry.job_id == job_id)
    if action is not None:
        query = query.where(AuditEntry.action == action)
    if limit is not None:
        query = query.limit(limit)
    with db.read() as s:
        rows = list(s.scalars(query))
        for row in rows:
            s.expunge(row)
    return rows


def as_dict(entry: AuditEntry) -> dict[str, Any]:
    at = aware(entry.at)
    return {
        "id": entry.id,
        "at": at.isoformat() if at else None,
        "job_id": entry.job_id,
        "delivery_guid": entry.delivery_guid,
        "repo": entry.repo,
        "actor": entry.actor,
        "action": entry.action,
        "detail": entry.detail,
        "token_kind": entry.token_kind,
        "identity": entry.identity,
    }


def format_entry(entry: AuditEntry) -> str:
    """One line for `onloop audit`: time, job, action, who, then the detail as JSON."""
    at = aware(entry.at)
    when = at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"
    who = entry.actor or ""
    if entry.token_kind or entry.identity:
        who = f"{who} [{entry.token_kind or '?'}:{entry.identity or '?'}]".strip()
    job = f"job {entry.job_id}" if entry.job_id is not None else "-"
    detail = json.dumps(entry.detail, sort_keys=True, separators=(",", ":"))
    return f"{when}  {entry.repo or '-'}  {job}  {entry.action}  {who or '-'}  {detail}"
