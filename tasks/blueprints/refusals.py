"""The hosts a job's setup was refused: kept on the job with their proposal, and read back
(from the database, never from a comment) for `/agent allow`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select

from app.core.kinds import Kind
from app.policy.egress_proposal import Proposal, Refused, proposal_json, propose, refused_from
from app.policy.repo_config import ConfigError, parse_repo_config
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.runner.context import JobContext
from tasks.sandbox.egress.policy import Refusal

REFUSED_KEY = "egress_refused"  # the job result's list of {host, port, why}
PROPOSAL_KEY = "egress_proposal"  # ...and what the status comment proposes about them
LOOK_BACK = 20  # jobs on a thread searched for the last one that ran setup
FINISHED = (JobState.SUCCEEDED, JobState.FAILED)
ADVICE = "what would allow each is said at the end"  # when there is a proposal


def record(ctx: JobContext, text: str | None, refused: Sequence[Refusal]) -> bool:
    """Keep on the job what setup of a trusted head was refused (an empty list too: that
    setup needed nothing more), and the proposal its status comment ends with; whether
    there is one."""
    items, _ = refused_from([{"host": r.host, "port": r.port, "why": r.why} for r in refused])
    ctx.recorded[REFUSED_KEY] = [r.to_json() for r in items]
    proposal = proposal_for(ctx, text, items)
    if proposal:
        ctx.recorded[PROPOSAL_KEY] = proposal_json(proposal, text)
    else:
        ctx.recorded.pop(PROPOSAL_KEY, None)
    return bool(proposal)


def proposal_for(ctx: JobContext, text: str | None, refused: Sequence[Refused]) -> Proposal:
    """What the organisation file (read now) lets the repository's file (`text`) allow."""
    org = ctx.org_config.load(ctx.settings).sandbox.egress
    try:
        own = parse_repo_config(text)[0].sandbox.egress
    except ConfigError:
        own = None
    return propose(refused, org, own)


@dataclass(frozen=True)
class LastSetup:
    """The last job on a thread whose setup ran, and the hosts it was refused."""

    job_id: int
    refused: list[Refused]


def last_refusals(db: Database, repo: str, number: int) -> LastSetup | None:
    """The refusals of the newest finished job on `repo`'s thread `number` that ran setup."""
    with db.read() as s:
        rows = s.execute(
            select(Job.id, Job.result)
            .where(
                Job.repo == repo,
                Job.number == number,
                Job.kind != Kind.ALLOW,
                Job.state.in_(FINISHED),
            )
            .order_by(Job.id.desc())
            .limit(LOOK_BACK)
        ).all()
    for job_id, result in rows:
        if isinstance(result, dict) and REFUSED_KEY in result:
            return LastSetup(job_id, refused_from(result[REFUSED_KEY])[0])
    return None
