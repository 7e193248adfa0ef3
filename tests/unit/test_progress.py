"""The status comment's last word carries what the job noticed on the way (its notes)."""

from __future__ import annotations

from app.store.models import Job, JobState
from tasks.feedback.progress import final_text

NOTE = "setup tried to reach evil.example; allow it in .github/onloop.yml under sandbox.egress"


def job() -> Job:
    return Job(id=7, kind="fix_ci", repo="o/r", number=1, requested_by="alice", params={})


def test_notes_are_said_on_success_and_on_failure() -> None:
    steps = [{"name": "setup", "state": "succeeded", "duration": 1.0}]
    done = final_text(job(), steps, JobState.SUCCEEDED, {"notes": [NOTE]}, {})
    failed = final_text(job(), steps, JobState.FAILED, {"error": "x", "notes": [NOTE]}, {})
    assert f"- {NOTE}" in done and f"- {NOTE}" in failed
    assert NOTE not in final_text(job(), steps, JobState.SUCCEEDED, {}, {})
