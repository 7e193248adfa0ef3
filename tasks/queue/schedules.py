"""Beat's schedule tick: the `schedules:` slots now due, each claimed once (a row per slot)
and started as its owner's job through the job rows and outbox, like a person's command."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from github import GithubException
from github.Repository import Repository
from requests import RequestException
from sqlalchemy import select

from app.core.kinds import KINDS, Kind, Kinds
from app.core.logs import get_logger
from app.core.markdown import inline_code
from app.core.settings import Settings
from app.github.clients import GitHubApp
from app.github.conditional import ETagCache
from app.github.user_tokens import find_user_id
from app.intake.commands import Command, CommandParams
from app.policy import governance
from app.policy.org_config import effective_for
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config
from app.policy.schedules import Schedule, ScheduleKind
from app.store import audit
from app.store import schedule_slots as slots
from app.store.db import Database
from app.store.models import Job, JobState, Outbox, aware, utcnow
from app.store.schedule_slots import Claim, ScheduleOutcome
from tasks.ci.failures import failed_job_records
from tasks.queue.schedule_configs import Installed, installed
from tasks.queue.schedule_consent import unapproved
from tasks.queue.schedule_notices import said_resolved, say_skipped
from tasks.runner.people import permitted, role_of
from tasks.runner.repo_settings import CONFIG_PATH

log = get_logger("onloop.schedules")
MAX_REVIEWS = 10  # stale pull requests one `review_stale` slot reviews at most
FIRED = "schedule.fired"  # audit: a slot that made (or joined) jobs
VERB = {ScheduleKind.FIX_CI: "fix", ScheduleKind.FIXERS: "fix", ScheduleKind.REVIEW_STALE: "review"}


@dataclass(frozen=True)
class Fired:
    """What one claimed slot came to."""

    repo: str
    schedule: str
    slot: datetime
    outcome: ScheduleOutcome
    detail: str | None = None
    job_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Target:
    """One job a slot makes."""

    kind: str
    number: int | None = None
    head_sha: str | None = None
    params: CommandParams = field(default_factory=CommandParams)


class Refused(Exception):
    """The schedule's owner cannot act in this repository."""


def tick(
    settings: Settings,
    github: GitHubApp,
    db: Database,
    etags: ETagCache,
    now: datetime | None = None,
    kinds: Kinds = KINDS,
) -> list[Fired]:
    """Fire every schedule whose latest slot (at or before `now`) no tick has claimed yet.
    A slot missed while beat was down fires once when it is back: only the latest counts."""
    now = now or utcnow()
    fired: list[Fired] = []
    for place in installed(db, github, etags, now):
        try:
            config, _ = parse_repo_config(place.text)
        except ConfigError:
            continue  # every job there refuses and says why; no schedule of a bad file runs
        for schedule in config.schedules:
            try:  # one repository's schedule never stops the others'
                slot = schedule.slot_at(now)
                claimed = slots.claim(db, place.repo, schedule.name, slot)
                if claimed is None:
                    continue  # another tick has it
                if claimed.previous is None:
                    done = Fired(place.repo, schedule.name, slot, ScheduleOutcome.ARMED)
                else:
                    done = _fire(
                        settings, github, db, place, config, schedule, slot, claimed, kinds
                    )
            except Exception:
                log.exception("schedule.tick_failed", repo=place.repo, schedule=schedule.name)
                continue
            log.info(
                "schedule.slot",
                repo=place.repo,
                schedule=schedule.name,
                slot=slot.isoformat(),
                outcome=done.outcome,
                detail=done.detail,
            )
            fired.append(done)
    slots.purge(db, now)
    return fired


def _fire(
    settings: Settings,
    github: GitHubApp,
    db: Database,
    place: Installed,
    config: RepoConfig,
    schedule: Schedule,
    slot: datetime,
    claimed: Claim,
    kinds: Kinds,
) -> Fired:
    def settled(outcome: ScheduleOutcome, detail: str | None = None) -> Fired:
        slots.settle(db, claimed.id, outcome, detail)
        return Fired(place.repo, schedule.name, slot, outcome, detail)

    repo: Repository | None = None
    try:
        owner_id = find_user_id(db, schedule.owner)
        kind = Kind.FIX_CI if schedule.kind == ScheduleKind.FIX_CI else Kind.REVIEW_PR
        token = github.installation_token(
            place.installation_id,
            repositories=[place.repo],
            permissions=governance.token_permissions(kind, kinds),
        )
        repo = github.installation_client(token).get_repo(place.repo)
        if owner_id is None:
            raise Refused(
                f"@{schedule.owner} has not signed in to onloop, so nothing can be done in "
                f"their name; they can sign in at {settings.public_url.rstrip('/')}/oauth/login"
            )
        _check_owner(settings, repo, config, schedule)
        if waiting := unapproved(settings, db, place.repo, schedule, config, owner_id):
            raise Refused(waiting)
        targets, nothing = _targets(db, repo, schedule, slot)
    except Refused as exc:
        say_skipped(settings, db, repo, place, schedule, slot, claimed, str(exc))
        return settled(ScheduleOutcome.SKIPPED, str(exc))
    except (GithubException, ConfigError, RequestException) as exc:  # the next slot tries again
        return settled(ScheduleOutcome.FAILED, f"GitHub or the organisation file: {exc}"[:500])
    if not targets:
        return settled(ScheduleOutcome.NOTHING, nothing)
    ids = _enqueue(db, place, repo.id, schedule, slot, owner_id, targets, claimed, kinds)
    detail = {"schedule": schedule.name, "slot": slot.isoformat(), "jobs": ids}
    audit.record(db, FIRED, repo=place.repo, actor=schedule.owner, detail=detail)
    if claimed.previous is not None and claimed.previous.outcome == ScheduleOutcome.SKIPPED:
        said_resolved(settings, repo, schedule, slot)
    return Fired(place.repo, schedule.name, slot, ScheduleOutcome.QUEUED, None, tuple(ids))


def _check_owner(settings: Settings, repo: Repository, config: RepoConfig, s: Schedule) -> None:
    """Refused unless the owner has the trigger permission and the verb is enabled, as for a
    person's command (the job checks both again when it starts); a schedule that opens pull
    requests needs `write` as well, whatever `trigger_permission` says, since it pushes a
    branch with the owner's token."""
    effective = effective_for(settings, config)
    verb = VERB[s.kind]
    if not effective.allows(verb):
        raise Refused(f"`commands:` in `{CONFIG_PATH}` does not enable `{verb}`")
    role = role_of(repo, s.owner)
    if not permitted(role, effective.trigger_permission):
        raise Refused(
            f"@{s.owner} has {inline_code(role)} access to {repo.full_name}; a schedule's "
            f"owner needs {inline_code(effective.trigger_permission)} (`trigger_permission`)"
        )
    if verb == "fix" and not permitted(role, "write"):
        raise Refused(
            f"@{s.owner} has {inline_code(role)} access to {repo.full_name}; a `{s.kind}` "
            "schedule pushes a branch in its owner's name, so its owner needs `write`"
        )


def _targets(
    db: Database, repo: Repository, schedule: Schedule, slot: datetime
) -> tuple[list[Target], str]:
    """The jobs the slot makes, or none and why."""
    if schedule.kind == ScheduleKind.FIXERS:
        return [Target(Kind.RUN_FIXERS)], ""
    if schedule.kind == ScheduleKind.FIX_CI:
        sha = repo.get_branch(repo.default_branch).commit.sha
        if not failed_job_records(repo, {}, sha):
            return [], f"CI is not red on {repo.default_branch} at {sha[:12]}"
        if _started(db, repo.full_name, Kind.FIX_CI, None, sha):
            return [], f"onloop already fixed (or is fixing) CI at {sha[:12]}"
        params = CommandParams(default_branch=True)
        return [Target(Kind.FIX_CI, head_sha=sha, params=params)], ""
    cutoff = slot - timedelta(days=schedule.older_than_days)
    found: list[Target] = []
    for pr in repo.get_pulls(state="open", sort="created", direction="asc"):
        if len(found) >= MAX_REVIEWS or (aware(pr.created_at) or slot) >= cutoff:
            break
        if not pr.draft and not _started(
            db, repo.full_name, Kind.REVIEW_PR, pr.number, pr.head.sha
        ):
            found.append(Target(Kind.REVIEW_PR, pr.number, pr.head.sha))
    days = schedule.older_than_days
    return found, f"no open pull request older than {days} day(s) awaits a review"


def _started(db: Database, repo: str, kind: str, number: int | None, head_sha: str) -> bool:
    """Whether a job of `kind` already did (or is doing) this head, and did not fail: a stale
    pull request or a red branch that has not moved is not worked on again at every slot."""
    where = Job.number == number if number is not None else Job.number.is_(None)
    with db.read() as s:
        found = s.scalar(
            select(Job.id)
            .where(Job.repo == repo, Job.kind == kind, where, Job.head_sha == head_sha)
            .where(Job.state != JobState.FAILED)
            .limit(1)
        )
    return found is not None


def _enqueue(
    db: Database,
    place: Installed,
    repo_id: int,
    schedule: Schedule,
    slot: datetime,
    owner_id: int | None,
    targets: list[Target],
    claimed: Claim,
    kinds: Kinds,
) -> list[int]:
    """The jobs and their outbox rows, with the slot's outcome, in one transaction; a live
    job with the same key (the owner's same work, still running) is joined instead."""
    ids: list[int] = []
    with db.write_lock(), db.transaction() as s:
        for target in targets:
            params = CommandParams(**target.params, schedule=schedule.name, slot=slot.isoformat())
            command = Command(
                kind=target.kind,
                repo=place.repo,
                requested_by=schedule.owner,
                numbers=(target.number,) if target.number is not None else (),
                repo_id=repo_id,
                installation_id=place.installation_id,
                head_sha=target.head_sha,
                requested_by_id=owner_id,
                params=params,
            )
            key = command.live_key(target.number, kinds)
            live = s.scalar(select(Job.id).where(Job.live_key == key))
            if live is not None:
                ids.append(int(live))
                continue
            job = Job(
                kind=target.kind,
                repo=place.repo,
                repo_id=repo_id,
                installation_id=place.installation_id,
                number=target.number,
                head_sha=target.head_sha,
                requested_by=schedule.owner,
                requested_by_id=owner_id,
                state=JobState.QUEUED,
                live_key=key,
                params=command.to_params(),
                steps=[],
                result={},
            )
            s.add(job)
            s.flush()
            s.add(Outbox(job_id=job.id))
            ids.append(job.id)
        slots.settle(db, claimed.id, ScheduleOutcome.QUEUED, None, ids, session=s)
    return ids
