"""The output kept for a job's page: capped per job with the oldest chunks dropped behind one
marker, tokens redacted even when split across chunks, kept per step, and purged by the beat."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.core.jobevents import JobEvents
from app.core.queues import PURGE_JOB_OUTPUT
from app.core.settings import Settings
from app.store import joblog
from app.store.db import Database
from app.store.models import JobOutput, utcnow
from tasks.queue.celery_app import celery_config
from tasks.runner.output import OutputLog
from tasks.worker import Worker
from tests.doubles.sandboxes import StartFn


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


def test_tokens_never_reach_the_kept_output(db: Database) -> None:
    joblog.append(db, 4, "url https://x-access-token:ghs_abcdefghijklmnop1234@h/r.git\n", 4096)
    joblog.append(
        db, 4, "jwt eyJhbGciOi.eyJpc3MiOjE.c2lnbmF0dXJl and github_pat_ABCDEFGH123\n", 4096
    )
    text = joblog.read(db, 4)
    assert "ghs_" not in text and "eyJ" not in text and "github_pat_" not in text
    assert text.count("[redacted]") == 3


def test_a_token_split_across_chunks_and_streams_is_still_redacted(db: Database) -> None:
    output = OutputLog(db, JobEvents(None), 5, cap=4096, step=lambda: "validate")
    output.command(["/bin/sh", "-c", "make test"])
    output.add("stdout", b"pushing with ghp_abcd")
    output.add("stderr", b"warning: half a line")
    output.add("stdout", b"efgh12345678 done\nnext")
    output.ended(2)
    marker, steps = joblog.by_step(db, 5)
    assert marker == ""
    text = steps["validate"]
    assert "ghp_" not in text and "efgh12345678" not in text
    assert "pushing with [redacted] done\n" in text
    assert text.startswith("$ make test\n") and text.endswith("[exit 2]\n")
    assert "warning: half a line" in text and "next" in text


def test_a_sandbox_command_s_output_is_kept_under_its_step(db: Database, start: StartFn) -> None:
    box = start()
    output = OutputLog(db, JobEvents(None), 6, cap=4096, step=lambda: "test")
    box.starting.append(output.command)
    box.streams.append(output.add)
    box.observers.append(lambda _argv, result: output.ended(result.exit_code))
    script = "printf 'ghp_abcd'; sleep 0.6; printf 'efgh12345678\\n'; echo oops >&2; exit 3"
    assert box.exec(["/bin/sh", "-c", script]).exit_code == 3
    text = joblog.by_step(db, 6)[1]["test"]
    assert text.startswith(f"$ {script}\n") and text.endswith("[exit 3]\n")
    ran = text.split("\n", 1)[1]  # what the command printed
    assert "[redacted]\n" in ran and "oops\n" in ran and "ghp_" not in ran


def test_a_short_command_is_one_write_with_its_line_output_and_exit(
    db: Database, start: StartFn
) -> None:
    """A job runs a dozen short commands: each is written once, at its end, not once for
    its line and again for its exit code."""
    box = start()
    output = OutputLog(db, JobEvents(None), 7, cap=4096, step=lambda: "plan")
    box.starting.append(output.command)
    box.streams.append(output.add)
    box.observers.append(lambda _argv, result: output.ended(result.exit_code))
    for word in ("one", "two"):
        assert box.exec(["/bin/sh", "-c", f"echo {word}"]).ok
    with db.read() as s:
        chunks = s.scalars(select(JobOutput.text).where(JobOutput.job_id == 7)).all()
    assert chunks == ["$ echo one\none\n[exit 0]\n", "$ echo two\ntwo\n[exit 0]\n"]


def test_the_beat_purges_output_past_the_days_kept(settings: Settings, db: Database) -> None:
    settings = settings.model_copy(update={"job_log_days": 7})
    with db.transaction() as s:
        s.add(JobOutput(job_id=7, text="old\n", size=4, at=utcnow() - timedelta(days=8)))
    joblog.append(db, 7, "new\n", cap=4096)
    schedule = celery_config(settings)["beat_schedule"]
    assert {entry["task"] for entry in schedule.values()} >= {PURGE_JOB_OUTPUT}
    worker = Worker(settings, db=db)
    assert worker.celery().tasks[PURGE_JOB_OUTPUT]() == 1
    assert joblog.read(db, 7) == "new\n"
