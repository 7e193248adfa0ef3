"""The figures of one fault run, read from the database and the GitHub double."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from app.store.db import Database
from app.store.models import TERMINAL_STATES, Delivery, Job, JobState
from tests.doubles.github.double import GitHubDouble
from tests.faults.sender import Sender


@dataclass(frozen=True)
class JobRow:
    id: int
    guid: str
    state: str
    finished_at: datetime | None


@dataclass(frozen=True)
class Figures:
    name: str
    sent: int  # deliveries posted (a redelivery of one is not counted again)
    acknowledged: int  # of those, answered 2xx (at once or when redelivered)
    refused: int  # answers that were not 2xx, or no answer
    recorded: int  # delivery rows
    jobs: int
    finished_once: int  # succeeded, with exactly one reply on the pull request
    duplicated: int  # jobs beyond one per comment, and replies beyond one per job
    lost: int  # acknowledged comments without a job that finished once
    drain: float  # seconds from the last answer to the last job finished

    def line(self) -> str:
        return (
            f"FAULT {self.name}: sent {self.sent} / acknowledged {self.acknowledged} "
            f"(refused {self.refused}) / recorded {self.recorded} / jobs {self.jobs} / "
            f"finished once {self.finished_once} / duplicated {self.duplicated} / "
            f"lost {self.lost} / drain {self.drain:.1f} s"
        )


def batch_jobs(db: Database, guids: set[str]) -> list[JobRow]:
    with db.read() as s:
        rows = s.execute(
            select(Job.id, Delivery.guid, Job.state, Job.finished_at)
            .join(Delivery, Job.delivery_row_id == Delivery.id)
            .where(Delivery.guid.in_(guids))
        ).all()
    return [JobRow(*row) for row in rows]


def recorded(db: Database, guids: set[str]) -> int:
    with db.read() as s:
        return len(s.scalars(select(Delivery.id).where(Delivery.guid.in_(guids))).all())


def replies(double: GitHubDouble, repo: str, pulls: list[int]) -> Counter[int]:
    """How many bot comments carry each job's marker."""
    bot, found = double.app.bot_login, Counter[int]()
    for number in pulls:
        for c in double.comments(repo, number):
            if c.user == bot and "<!-- onloop:job-" in c.body:
                job_id = c.body.split("<!-- onloop:job-", 1)[1].split(" ", 1)[0]
                if job_id.isdigit():
                    found[int(job_id)] += 1
    return found


def drained(db: Database, sender: Sender, timeout: float) -> list[JobRow]:
    """Waits (up to `timeout` s) until every acknowledged comment has a finished job."""
    acked = sender.acknowledged_guids()
    by_guid = {d.guid: d.comment_id for d in sender.sent}
    wanted = {by_guid[g] for g in acked}
    deadline = time.monotonic() + timeout
    while True:
        jobs = batch_jobs(db, set(by_guid))
        done = {by_guid[j.guid] for j in jobs if j.state in TERMINAL_STATES}
        if (wanted <= done and all(j.state in TERMINAL_STATES for j in jobs)) or (
            time.monotonic() > deadline
        ):
            return jobs
        time.sleep(0.5)


def measure(
    name: str,
    db: Database,
    double: GitHubDouble,
    repo: str,
    pulls: list[int],
    sender: Sender,
    timeout: float,
) -> Figures:
    jobs = drained(db, sender, timeout)
    time.sleep(1)  # a reply is posted a moment before its job's row is final: let it land
    jobs = batch_jobs(db, {d.guid for d in sender.sent})
    by_guid = {d.guid: d.comment_id for d in sender.sent}
    acked = sender.acknowledged_guids()
    posted = replies(double, repo, pulls)
    per_comment = Counter(by_guid[j.guid] for j in jobs)
    once = [j for j in jobs if j.state == JobState.SUCCEEDED and posted[j.id] == 1]
    finished_comments = {by_guid[j.guid] for j in once}
    duplicated = sum(n - 1 for n in per_comment.values()) + sum(
        max(0, posted[j.id] - 1) for j in jobs
    )
    ends = [j.finished_at.timestamp() for j in jobs if j.finished_at is not None]
    return Figures(
        name=name,
        sent=len(sender.sent),
        acknowledged=sum(1 for d in sender.sent if d.guid in acked),
        refused=len(sender.refused()),
        recorded=recorded(db, set(by_guid)),
        jobs=len(jobs),
        finished_once=len(once),
        duplicated=duplicated,
        lost=len({by_guid[g] for g in acked} - finished_comments),
        drain=max(0.0, max(ends, default=0.0) - sender.last_answer()),
    )
