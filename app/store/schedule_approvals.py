"""Schedule approvals: the owner's consent to one schedule as it is, asked once per change."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from app.store.db import Database
from app.store.fleet_tables import ScheduleApproval
from app.store.models import utcnow


def ask(
    db: Database, repo: str, schedule: str, digest: str, owner: str, owner_id: int, text: str
) -> ScheduleApproval:
    """The approval row of (repo, schedule, digest), made when first asked (the digest
    covers the owner's login, so another owner is another row)."""
    insert = sqlite.insert if db.sql.sqlite else postgresql.insert
    statement = (
        insert(ScheduleApproval)
        .values(
            repo=repo,
            schedule=schedule,
            digest=digest,
            owner=owner,
            owner_id=owner_id,
            text=text,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["repo", "schedule", "digest"])
    )
    with db.write_lock(), db.transaction() as s:
        s.execute(statement)
        row = s.scalar(
            select(ScheduleApproval).where(
                ScheduleApproval.repo == repo,
                ScheduleApproval.schedule == schedule,
                ScheduleApproval.digest == digest,
            )
        )
        assert row is not None
        return row


def get(db: Database, approval_id: int) -> ScheduleApproval | None:
    with db.read() as s:
        return s.get(ScheduleApproval, approval_id)


def approve(db: Database, approval_id: int, user_id: int, digest: str) -> bool:
    """The owner (by GitHub user id) approves the schedule as shown (`digest`); False when
    it is not theirs or the page showed another version."""
    with db.write_lock(), db.transaction() as s:
        row = s.scalar(
            select(ScheduleApproval).where(ScheduleApproval.id == approval_id).with_for_update()
        )
        if row is None or row.owner_id != user_id or row.digest != digest:
            return False
        if row.approved_at is None:
            row.approved_at = utcnow()
    return True
