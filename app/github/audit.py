"""The audit log's view of GitHub: every write onloop's clients make, with who made it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from app.github.transport import GitHubWrite, observe_writes
from app.store.audit import GITHUB_WRITE, record
from app.store.db import Database

log = logging.getLogger("onloop.audit")


@contextmanager
def audit_writes(
    db: Database, *, repo: str | None, job_id: int | None = None, delivery_guid: str | None = None
) -> Iterator[None]:
    """Record every GitHub write made by onloop's clients inside this block (this thread),
    with the token kind and identity that made it. Wrap a job's runner in it."""

    def write(w: GitHubWrite) -> None:
        try:
            record(
                db,
                GITHUB_WRITE,
                repo=repo,
                job_id=job_id,
                delivery_guid=delivery_guid,
                detail={"method": w.method, "path": w.path, "status": w.status},
                token_kind=w.token_kind,
                identity=w.identity,
            )
        except Exception:  # the write happened; losing its record must not undo the job
            log.exception("could not record a GitHub write in the audit log")

    with observe_writes(write):
        yield
