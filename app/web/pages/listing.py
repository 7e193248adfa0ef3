"""The jobs a person may see, as /jobs lists them: filtered, newest first, a page at a time;
read with one query over the indexed columns, each distinct repository's access asked once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Select, func, select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState, aware
from app.web.pages.access import Access, AccessCheck
from app.web.pages.session import Session

PAGE_SIZE = 50
MAX_PAGE = 10_000  # past it an offset is no use to anyone, and costly to the database
FIELDS = ("repo", "kind", "state", "person", "since", "until")
_OUTCOME_CHARS = 80


class BadFilter(ValueError):
    """A filter that cannot be used; its message says which and why."""


@dataclass(frozen=True)
class Filters:
    """What /jobs?repo=&kind=&state=&person=&since=&until=&page= asks for; blank is 'any'."""

    repo: str = ""
    kind: str = ""
    state: str = ""
    person: str = ""
    since: date | None = None
    until: date | None = None  # inclusive: the whole day
    page: int = 1

    @classmethod
    def parse(cls, args: Mapping[str, str], kinds: tuple[str, ...]) -> Filters:
        text = {name: str(args.get(name) or "").strip()[:200] for name in FIELDS}
        if text["kind"] and text["kind"] not in kinds:
            raise BadFilter(f"There is no job kind {text['kind']!r}.")
        if text["state"] and text["state"] not in set(JobState):
            raise BadFilter(f"There is no job state {text['state']!r}.")
        try:
            page = int(args.get("page") or 1)
        except ValueError:
            raise BadFilter("page must be a number.") from None
        if not 1 <= page <= MAX_PAGE:
            raise BadFilter(f"page must be from 1 to {MAX_PAGE}.")
        return cls(
            repo=text["repo"],
            kind=text["kind"],
            state=text["state"],
            person=text["person"].removeprefix("@"),
            since=_date("since", text["since"]),
            until=_date("until", text["until"]),
            page=page,
        )

    def query(self, **changes: object) -> str:
        """This list's query string, with `changes` (e.g. page=2); blank filters left out."""
        values: dict[str, object] = {name: getattr(self, name) for name in (*FIELDS, "page")}
        pairs = {k: str(v) for k, v in (values | changes).items() if v not in (None, "")}
        if pairs.get("page") == "1":
            del pairs["page"]
        return urlencode(pairs)


def _date(name: str, value: str) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise BadFilter(f"{name} must be a date, YYYY-MM-DD.") from None


@dataclass(frozen=True)
class Row:
    id: int
    kind: str
    repo: str
    repo_url: str
    number: int | None
    target_url: str | None  # the issue or pull request on GitHub
    person: str
    person_url: str
    state: str
    outcome: str
    duration: str
    created: str


@dataclass(frozen=True)
class Listing:
    rows: list[Row]
    filters: Filters
    has_next: bool
    repos: list[str]  # the repositories the person may see jobs of, for the filter's list


def visible_repos(db: Database, access: AccessCheck, session: Session) -> list[str] | None:
    """The repositories whose jobs `session` may see; None for an operator (all of them).
    One access check per distinct repository with jobs, each cached (app/web/pages/access.py)."""
    if access.is_operator(session):
        return None
    return [repo for repo in repos_with_jobs(db) if access.of(session, repo) != Access.NONE]


def repos_with_jobs(db: Database) -> list[str]:
    """Each repository that has jobs, once (an index-only scan of ix_jobs_repo)."""
    with db.read() as s:
        return sorted(s.scalars(select(Job.repo).distinct()))


def _where(query: Select[Any], filters: Filters, repos: list[str] | None) -> Select[Any]:
    if repos is not None:
        query = query.where(Job.repo.in_(repos))
    if filters.kind:
        query = query.where(Job.kind == filters.kind)
    if filters.state:
        query = query.where(Job.state == filters.state)
    if filters.person:
        query = query.where(func.lower(Job.requested_by) == filters.person.lower())
    if filters.since is not None:
        query = query.where(Job.created_at >= datetime.combine(filters.since, time(), UTC))
    if filters.until is not None and filters.until < date.max:  # date.max: no end at all
        end = datetime.combine(filters.until + timedelta(days=1), time(), UTC)
        query = query.where(Job.created_at < end)
    return query


def listing(
    settings: Settings, db: Database, access: AccessCheck, session: Session, filters: Filters
) -> Listing:
    """One page of the jobs `session` may see that match `filters`, newest first."""
    visible = visible_repos(db, access, session)
    known = visible if visible is not None else repos_with_jobs(db)
    repos = visible
    if filters.repo:  # as GitHub's names: case-insensitive, matched to the stored spelling
        repos = [repo for repo in known if repo.lower() == filters.repo.lower()]
    query = select(
        Job.id,
        Job.kind,
        Job.repo,
        Job.number,
        Job.requested_by,
        Job.state,
        Job.result,
        Job.created_at,
        Job.started_at,
        Job.finished_at,
    ).order_by(Job.created_at.desc(), Job.id.desc())
    query = _where(query, filters, repos)
    query = query.offset((filters.page - 1) * PAGE_SIZE).limit(PAGE_SIZE + 1)
    with db.read() as s:
        found = list(s.execute(query)) if repos != [] else []
    web = settings.github_url.rstrip("/")
    rows = [_row(web, values) for values in found[:PAGE_SIZE]]
    return Listing(rows=rows, filters=filters, has_next=len(found) > PAGE_SIZE, repos=known)


def outcome(state: str, result: Mapping[str, Any] | None) -> str:
    """One short line: the result's `outcome`, else a failed job's error, a cancelled one's
    reason; "" while the job is live."""
    result = result if isinstance(result, Mapping) else {}
    said = result.get("outcome")
    if said:
        return str(said)[:_OUTCOME_CHARS]
    if state not in TERMINAL_STATES:
        return ""
    if state == JobState.FAILED:
        text = str(result.get("error") or "failed")
    elif state == JobState.CANCELLED:
        text = str(result.get("reason") or "cancelled")
    elif isinstance(result.get("pr"), int):
        text = f"pull request #{result['pr']}"
    else:
        text = "done"
    first = text.strip().splitlines()[0] if text.strip() else text
    return first[:_OUTCOME_CHARS]


def duration(started: datetime | None, finished: datetime | None) -> str:
    start, end = aware(started), aware(finished)
    if start is None:
        return "—"
    if end is None:
        return "running"
    seconds = max((end - start).total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _row(web: str, values: Any) -> Row:
    (job_id, kind, repo, number, person, state, result, created, started, finished) = values
    when = aware(created)
    return Row(
        id=job_id,
        kind=kind,
        repo=repo,
        repo_url=f"{web}/{repo}",
        number=number,
        target_url=f"{web}/{repo}/issues/{number}" if number is not None else None,
        person=person,
        person_url=f"{web}/{person}",
        state=state,
        outcome=outcome(state, result),
        duration=duration(started, finished),
        created=when.strftime("%Y-%m-%d %H:%M UTC") if when else "—",
    )
