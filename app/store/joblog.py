"""A job's sandbox output kept for its page: appended in chunks with tokens redacted (as in
the audit log), capped per job (the oldest chunks fold into one marker row), and purged after
ONLOOP_JOB_LOG_DAYS."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, select

from app.store.audit import redact
from app.store.db import Database, rowcount
from app.store.models import JobOutput, utcnow

DROPPED = "[onloop: {n} bytes of older output dropped]\n"


def append(db: Database, job_id: int, text: str, cap: int, step: str | None = None) -> None:
    """Add `text` (output of step `step`) to job `job_id`'s output, anything that looks like a
    token replaced; past `cap` bytes the oldest chunks are dropped and counted in the job's
    marker row, which reads first. A caller keeps a token within one chunk (whole lines)."""
    if not text:
        return
    text = str(redact(text))
    data = text.encode("utf-8", "replace")
    if len(data) > cap:  # one chunk larger than the cap: keep its end
        dropped = len(data) - cap
        data = data[-cap:]
        text = data.decode("utf-8", "ignore")
    else:
        dropped = 0
    with db.write_lock(), db.transaction() as s:
        s.add(JobOutput(job_id=job_id, step=step and step[:64], text=text, size=len(data)))
        s.flush()
        total = s.scalar(
            select(func.coalesce(func.sum(JobOutput.size), 0)).where(
                JobOutput.job_id == job_id, JobOutput.marker.is_(False)
            )
        )
        over = int(total or 0) - cap
        if over <= 0 and not dropped:
            return
        rows = s.execute(
            select(JobOutput.id, JobOutput.size)
            .where(JobOutput.job_id == job_id, JobOutput.marker.is_(False))
            .order_by(JobOutput.id)
        ).all()
        gone: list[int] = []
        for row in rows[:-1]:  # never the chunk just added
            if over <= 0:
                break
            gone.append(row.id)
            over -= row.size
            dropped += row.size
        marker = s.scalar(
            select(JobOutput).where(JobOutput.job_id == job_id, JobOutput.marker.is_(True))
        )
        if marker is None:
            marker = JobOutput(job_id=job_id, text="", size=0, marker=True)
            s.add(marker)
        if gone:
            s.execute(delete(JobOutput).where(JobOutput.id.in_(gone)))
        marker.size += dropped
        marker.text = DROPPED.format(n=marker.size)


def read(db: Database, job_id: int) -> str:
    """The job's kept output, oldest first (with the marker when some was dropped)."""
    with db.read() as s:
        chunks = s.scalars(
            select(JobOutput.text)
            .where(JobOutput.job_id == job_id)
            .order_by(JobOutput.marker.desc(), JobOutput.id)
        )
        return "".join(chunks)


def by_step(db: Database, job_id: int) -> tuple[str, dict[str, str]]:
    """The job's kept output per step name, oldest first, and the marker's text ("" when
    nothing was dropped). Output outside any step is under ""."""
    steps: dict[str, str] = {}
    marker = ""
    with db.read() as s:
        rows = s.execute(
            select(JobOutput.step, JobOutput.text, JobOutput.marker)
            .where(JobOutput.job_id == job_id)
            .order_by(JobOutput.id)
        ).all()
    for row in rows:
        if row.marker:
            marker = row.text
        else:
            steps[row.step or ""] = steps.get(row.step or "", "") + row.text
    return marker, steps


def purge(db: Database, days: int, now: datetime | None = None) -> int:
    """Delete output older than `days`; how many chunks went."""
    cutoff = (now or utcnow()) - timedelta(days=days)
    with db.write_lock(), db.transaction() as s:
        return rowcount(s.execute(delete(JobOutput).where(JobOutput.at < cutoff)))
