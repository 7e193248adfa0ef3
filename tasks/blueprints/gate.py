"""Who is asking: the trigger permission every command needs, one notice for outsiders, and
answers at most once a minute per person and thread."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from github.Repository import Repository

from app.core.kinds import Kind
from app.policy.repo_config import ConfigError
from app.store.models import Job
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.notices import notice
from tasks.runner.people import permitted, role_of
from tasks.runner.repo_settings import LoadedConfig

OUTSIDER_SECONDS = 24 * 3600  # an outsider is told once per thread per day, then not again
REPLY_SECONDS = 60  # `help` and `status`: one answer per person, thread and minute
STRICTEST = "admin"


@dataclass(frozen=True)
class Asker:
    """The person a job acts for, their role on the repository and the role commands need."""

    login: str
    role: str
    required: str

    @property
    def permitted(self) -> bool:
        return permitted(self.role, self.required)

    def says(self) -> str:
        return f"@{self.login} is {self.role}; {self.required} needed"


def required_permission(ctx: JobContext, loaded: LoadedConfig) -> str:
    """The `trigger_permission` in effect: the repository's within the organisation's. An
    invalid repository file counts as the built-in defaults for `help` (which must still tell
    maintainers that it is invalid) and as admin for everything else: its own, stricter
    `trigger_permission` may be the line that broke. An unusable organisation file: admin."""
    if loaded.error is not None and ctx.job.kind != Kind.HELP:
        return STRICTEST
    try:
        return ctx.org_config.effective(ctx.settings, loaded.config).trigger_permission
    except ConfigError:
        return STRICTEST


def asker(ctx: JobContext, repo: Repository, loaded: LoadedConfig) -> Asker:
    login = ctx.job.requested_by
    return Asker(login, role_of(repo, login), required_permission(ctx, loaded))


def same_person(job: Job, other: Job) -> bool:
    """Whether the two jobs were asked for by one person: by user id (a login can be
    renamed), by login only where an id is missing."""
    if job.requested_by_id is not None and other.requested_by_id is not None:
        return job.requested_by_id == other.requested_by_id
    return job.requested_by.lower() == other.requested_by.lower()


def _person_on_thread(job: Job) -> str:
    who = str(job.requested_by_id) if job.requested_by_id is not None else job.requested_by
    number = job.number if job.number is not None else "-"
    return f"{job.repo.lower()}#{number}:{who.lower()}"


def first_time(ctx: JobContext, what: str, seconds: int) -> bool:
    """Whether this job is the first in `seconds` to do `what` for its person on its thread
    (a job run again keeps its turn). Kept in Redis with an expiry (`Once`); a worker with no
    Redis has no such memory and lets every one through."""
    if ctx.once is None:
        return True
    key = f"{what}:{_person_on_thread(ctx.job)}"
    return ctx.once.first(key, str(ctx.job.id), seconds)


def tell_outsider(
    ctx: JobContext, repo: Repository, who: Asker, message: str = ""
) -> dict[str, Any]:
    """Tell a person below the trigger permission so, at most once per thread and day: the
    first command of theirs there gets one short notice (`message`, or a plain one), later
    ones nothing. So an outsider cannot make onloop comment for every command they post.
    Returns what the job's result records of it."""
    if first_time(ctx, "outsider", OUTSIDER_SECONDS):
        notice(
            ctx,
            repo,
            "refused",
            message
            or f"Sorry @{who.login}: onloop's commands on this repository need {who.required} "
            f"permission and you have {who.role}, so onloop does not act on yours here. A "
            "maintainer can run the command for you.",
        )
        return {"role": who.role}
    return {
        "role": who.role,
        "quiet": True,
        "reason": f"@{who.login} has {who.role} permission and {who.required} is needed; "
        "they were told so on this thread within the day, so onloop did not answer again",
    }


def refuse_outsider(
    ctx: JobContext, repo: Repository, who: Asker, message: str = "", **result: Any
) -> NoReturn:
    """Refuse the command of a person below the trigger permission, telling them only as
    `tell_outsider` allows; `result` is added to the job's."""
    told = tell_outsider(ctx, repo, who, message)
    raise JobFailed("refused", rule="trigger_permission", **told, **result)
