"""Policy before any work: the kill switch, the rules a job must pass, its token's permissions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, or_, select

from app.core.kinds import KINDS, Kind, Kinds
from app.policy.repo_config import PERMISSION_RANK, RepoConfig
from app.store import audit
from app.store.db import Database, rowcount
from app.store.models import Job, Pause

REPO, INSTALLATION = "repo", "installation"


def token_permissions(kind: str, kinds: Kinds = KINDS) -> dict[str, str]:
    """The installation token permissions a job of `kind` needs; the narrowest set known."""
    spec = kinds.get(kind)
    return dict(spec.permissions) if spec is not None else {"metadata": "read"}


def feedback_permissions() -> dict[str, str]:
    """What the token of a job's feedback (tasks/feedback) may do: 👀 on the command and the
    status comment (issues), the check run (checks); never read or write the code."""
    return {"metadata": "read", "issues": "write", "checks": "write"}


# --- the kill switch -------------------------------------------------------------------


def is_paused(db: Database, repo: str | None, installation_id: int | None) -> Pause | None:
    """The pause that stops work on `repo` (or its installation), if there is one."""
    targets = []
    if repo:
        targets.append((Pause.scope == REPO) & (Pause.target == repo.lower()))
    if installation_id is not None:
        targets.append((Pause.scope == INSTALLATION) & (Pause.target == str(installation_id)))
    if not targets:
        return None
    with db.read() as s:
        found = s.scalars(select(Pause).where(or_(*targets)).order_by(Pause.scope)).first()
        if found is not None:
            s.expunge(found)
        return found


def _target(scope: str, target: str) -> str:
    if scope == REPO:
        if target.count("/") != 1 or not all(target.split("/")):
            raise ValueError(f"a repository is owner/name, not {target!r}")
        return target.lower()
    if scope == INSTALLATION:
        return str(int(target))
    raise ValueError(f"unknown pause scope {scope!r}")


def pause(
    db: Database, scope: str, target: str, *, reason: str | None = None, by: str | None = None
) -> Pause:
    """Stop new work for a repository (owner/name) or an installation (its id); idempotent."""
    key = _target(scope, target)
    with db.transaction() as s:
        row = s.get(Pause, (scope, key))
        if row is None:
            row = Pause(scope=scope, target=key, reason=reason, paused_by=by)
            s.add(row)
        elif reason:
            row.reason = reason
        s.flush()
        s.expunge(row)
    audit.record(
        db,
        audit.PAUSE,
        repo=key if scope == REPO else None,
        actor=by,
        detail={"scope": scope, "target": key, "reason": reason},
    )
    return row


def resume(db: Database, scope: str, target: str, *, by: str | None = None) -> bool:
    """Lift a pause; False when there was none."""
    key = _target(scope, target)
    with db.transaction() as s:
        gone = s.execute(delete(Pause).where(Pause.scope == scope, Pause.target == key))
        lifted = bool(rowcount(gone))
    if lifted:
        audit.record(
            db,
            audit.RESUME,
            repo=key if scope == REPO else None,
            actor=by,
            detail={"scope": scope, "target": key},
        )
    return lifted


def pauses(db: Database) -> list[Pause]:
    with db.read() as s:
        rows = list(s.scalars(select(Pause).order_by(Pause.created_at)))
        for row in rows:
            s.expunge(row)
        return rows


# --- the rules -------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What the policy looks at: the job, the person (and their role) and the pull request."""

    kind: str
    repo: str
    requested_by: str
    role: str  # people.role_of(); for automatic jobs, whoever the caller holds responsible
    automatic: bool = False  # fix_ci started by a failing run, not by a person
    fork: bool = False  # the pull request's head lives in another repository
    maintainer_can_modify: bool = False
    ci_fix_attempts: int = 0  # automatic CI fixes since the last head onloop did not make


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    rule: str  # the rule that decided: "ok", "kill_switch", "bots", "commands", ...
    message: str = ""  # for the person, when refused

    def as_detail(self) -> dict[str, object]:
        return {"allowed": self.allowed, "rule": self.rule, "message": self.message}


ALLOWED = Verdict(True, "ok")


def _is_bot(login: str) -> bool:
    return login.endswith("[bot]")


def verdict(
    req: Request, config: RepoConfig, paused: Pause | None = None, kinds: Kinds = KINDS
) -> Verdict:
    """The first rule `req` breaks under `config` (the effective one), or ALLOWED. Pure."""
    spec = kinds.get(req.kind)
    if paused is not None:
        what = "this repository" if paused.scope == REPO else "this installation"
        why = f": {paused.reason}" if paused.reason else ""
        return Verdict(False, "kill_switch", f"onloop is paused for {what}{why}.")
    if _is_bot(req.requested_by) and not req.automatic:
        return Verdict(False, "bots", f"{req.requested_by} is a bot; bots cannot start work.")
    command = spec.config_key if spec is not None else None
    if command is not None and command not in config.commands:
        return Verdict(
            False,
            "commands",
            f"`{command}` is not enabled for this repository (`commands:` in "
            "`.github/onloop.yml` on the default branch, within the organisation's defaults).",
        )
    if req.automatic:
        if not config.auto_fix_ci:
            return Verdict(False, "auto_fix_ci", "automatic CI fixes are off for this repository.")
        if req.ci_fix_attempts >= config.max_ci_fix_attempts:
            return Verdict(
                False,
                "max_ci_fix_attempts",
                f"onloop tried to fix CI {req.ci_fix_attempts} time(s), the most "
                "`max_ci_fix_attempts` allows; comment `/agent fix` to try again.",
            )
        if req.fork:
            return Verdict(
                False,
                "fork.automatic",
                "onloop does not act on its own on pull requests from forks; a maintainer "
                "can comment `/agent fix`.",
            )
    required = config.trigger_permission
    if PERMISSION_RANK.get(req.role, -1) < PERMISSION_RANK[required]:
        return Verdict(
            False,
            "trigger_permission",
            f"`{req.kind}` needs {required} permission on this repository and "
            f"@{req.requested_by} has {req.role}.",
        )
    pushes = spec is not None and spec.pushes_to_head
    if req.fork and pushes and not req.maintainer_can_modify:
        return Verdict(
            False,
            "fork.no_edits",
            "this pull request's branch is in a fork that does not allow edits from "
            "maintainers, so onloop cannot push to it; tick *Allow edits by maintainers*.",
        )
    return ALLOWED


# --- the CI-fix cap --------------------------------------------------------------------

BEFORE_WORK = ("policy", "authorization")  # a job whose steps go past these got to work
FIX_JOBS_READ = 200  # the newest fix_ci jobs of one pull request looked at; far past any cap


def _got_to_work(steps: Sequence[Mapping[str, Any]] | None) -> bool:
    return any(step.get("name") not in BEFORE_WORK for step in steps or ())


def ci_fix_attempts(
    db: Database, repo: str, number: int | None, head_sha: str, *, job_id: int | None = None
) -> int:
    """How many automatic CI fixes onloop made since the last head it did not make: the one
    count the `max_ci_fix_attempts` rule reads. From the jobs table alone: a fix_ci job that
    pushed records the head it made (`Job.head_sha`) and, in its command, the head it started
    from; following those back from `head_sha` gives the heads onloop made in a row, down to
    the last one a person pushed. Every automatic fix_ci job that got to work on one of those
    heads is an attempt, whether it pushed or not. A person's push is a head no fix made, so
    it starts the count again; a commit's `Onloop-Job` trailer, which anyone can write, is
    not believed."""
    where = Job.number == number if number is not None else Job.number.is_(None)
    with db.read() as s:
        rows = s.execute(
            select(Job.id, Job.head_sha, Job.params, Job.steps)
            .where(Job.repo == repo, Job.kind == Kind.FIX_CI, where)
            .order_by(Job.id.desc())
            .limit(FIX_JOBS_READ)
        ).all()
    fixes = [
        (str((row.params or {}).get("head_sha") or ""), row.head_sha, row.params or {})
        for row in rows
        if row.id != job_id and _got_to_work(row.steps)
    ]
    made = {made: started for started, made, _ in fixes if made and started and made != started}
    heads, head = {head_sha}, head_sha
    while head in made and made[head] not in heads:
        head = made[head]
        heads.add(head)
    return sum(
        1
        for started, _, params in fixes
        if started in heads and bool((params.get("params") or {}).get("automatic"))
    )


def check(
    db: Database,
    req: Request,
    config: RepoConfig,
    *,
    installation_id: int | None,
    job_id: int | None = None,
    kinds: Kinds = KINDS,
) -> Verdict:
    """`verdict()` with the kill switch read from the database, recorded in the audit log."""
    result = verdict(req, config, is_paused(db, req.repo, installation_id), kinds)
    audit.record(
        db,
        audit.POLICY,
        repo=req.repo,
        job_id=job_id,
        actor=req.requested_by,
        detail={**result.as_detail(), "kind": req.kind, "role": req.role},
    )
    return result
