"""The output kept for a job's page: capped per job with the oldest chunks dropped behind one
marker, and purged by age."""

from __future__ import annotations

from datetime import timedelta

from app.store import joblog
from app.store.db import Database
from app.store.models import utcnow


def test_output_past_the_cap_drops_the_oldest_behind_a_marker(db: Database) -> None:
    for i in range(10):
        joblog.append(db, 1, f"line {i} " + "x" * 990 + "\n", cap=4096)
    joblog.append(db, 2, "other job\n", cap=4096)
    text = joblog.read(db, 1)
    assert text.startswith("[onloop: ")
    assert "older output dropped" in text.splitlines()[0]
    assert "line 9 " in text and "line 0 " not in text
    assert len(text.encode()) <= 4096 + 100
    assert joblog.read(db, 2) == "other job\n"


def test_purge_removes_output_older_than_the_days_kept(db: Database) -> None:
    joblog.append(db, 3, "kept\n", cap=4096)
    assert joblog.purge(db, days=30) == 0
    assert joblog.purge(db, days=30, now=utcnow() + timedelta(days=31)) == 1
    assert joblog.read(db, 3) == ""
