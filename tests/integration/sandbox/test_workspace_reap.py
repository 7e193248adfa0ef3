"""The periodic reap removes job workspaces a killed worker left behind, on the real filesystem and
database: only those of jobs that no longer run, never a fresh one, never through a symlink, and
through directories the sandbox made read-only, whether the worker is root or not."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.sandbox.base import chown_tree
from tasks.sandbox.reaper import job_from_workspace, job_id_of, reap_workspaces
from tasks.sandbox.workplace import reap_sandboxes

SANDBOX_UID = 1000  # Limits().uid: a root worker chowns the workspace to it


def add_job(db: Database, state: str) -> int:
    with db.transaction() as s:
        job = Job(kind="review_pr", repo="o/r", number=1, requested_by="alice", state=state)
        s.add(job)
        s.flush()
        return job.id


def workspace(root: Path, job: int | str, suffix: str, *, age: float = 3600.0) -> Path:
    """A job's checkout as tasks/sandbox/job.py makes it, last changed `age` seconds ago, with
    what a sandbox leaves: a read-only directory with files in it."""
    path = root / f"job-{job}-{suffix}"
    (path / "src" / "locked").mkdir(parents=True)
    (path / "README.md").write_text("widgets\n")
    (path / "src" / "locked" / "built.so").write_bytes(b"\0" * 64)
    (path / "src" / "locked").chmod(0o555)
    return aged(path, age)


def aged(path: Path, age: float = 3600.0) -> Path:
    then = time.time() - age
    os.utime(path, (then, then), follow_symlinks=False)
    return path


def test_the_reap_removes_workspaces_of_jobs_that_no_longer_run(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    running, queued = add_job(db, JobState.RUNNING), add_job(db, JobState.QUEUED)
    done, failed = add_job(db, JobState.SUCCEEDED), add_job(db, JobState.FAILED)
    root = tmp_path / "work" / "workspaces"
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")

    kept = [workspace(root, running, "a1b2c3d4"), workspace(root, queued, "e5f6g7h8")]
    fresh = workspace(root, done, "starting", age=0)  # within the minimum age
    gone = [workspace(root, done, "i9j0k1l2"), workspace(root, failed, "m3n4o5p6")]
    gone.append(workspace(root, 999, "q7r8s9t0"))  # a job the database never had
    (gone[0] / "escape").symlink_to(outside)  # the sandbox may leave any link
    if os.geteuid() == 0:
        chown_tree(gone[0], SANDBOX_UID, SANDBOX_UID)  # as a root worker leaves it
    aged(gone[0])
    link = root / f"job-{done}-linked00"
    link.symlink_to(outside)  # not a workspace: the reap follows no link
    slot = root / "slot-0"  # the warm pool's, swept by the pool
    slot.mkdir()

    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database_url,
        sandbox_backend="local",  # the Docker reap would judge every container on this host
        work_dir=tmp_path / "work",
    )
    removed = reap_sandboxes(settings, db)

    assert sorted(removed) == sorted(f"workspaces/{p.name}" for p in gone)
    assert not any(os.path.lexists(p) for p in gone)
    assert all(p.is_dir() for p in [*kept, fresh, slot])
    assert (kept[0] / "src" / "locked" / "built.so").exists()
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "mine\n"
    assert reap_sandboxes(settings, db) == []  # nothing left to do


def test_a_worker_that_is_not_root_removes_a_workspace_with_read_only_directories() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to become another uid")
    nobody = 65534
    base = Path(tempfile.mkdtemp(prefix="onloop-reap-"))  # /tmp: reachable by any uid
    root = base / "workspaces"
    try:
        os.chown(base, nobody, nobody)
        pid = os.fork()
        if pid == 0:  # a worker process that is not root (the interpreter is loaded already)
            code = 1
            try:
                os.setgroups([])
                os.setgid(nobody)
                os.setuid(nobody)
                workspace(root, 7, "u1v2w3x4")
                (root / "job-7-u1v2w3x4" / "src").chmod(0o500)  # not writable
                aged(root / "job-7-u1v2w3x4")
                code = 0 if reap_workspaces(root, lambda job: False) == ["job-7-u1v2w3x4"] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert list(root.iterdir()) == []
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_workspace_name_gives_its_job() -> None:
    assert job_from_workspace("job-42-k3j_x9a1") == "42"
    assert job_from_workspace("job-a-b_c-k3j_x9a1") == "a-b_c"  # no job id: reaped
    assert job_from_workspace("job-nosuffix") is None
    assert job_from_workspace("slot-3") is None
    assert job_id_of("42") == 42
    assert job_id_of("a-b_c") is job_id_of("") is job_id_of("-1") is job_id_of("\u0663") is None


def test_a_workspace_that_names_no_job_id_is_reaped(tmp_path: Path) -> None:
    asked: list[int] = []

    def is_running(job: int) -> bool:
        asked.append(job)
        return True

    old = workspace(tmp_path, "a-b_c", "k3j_x9a1")
    mine = workspace(tmp_path, 12, "m4n5o6p7")
    assert reap_workspaces(tmp_path, is_running) == [old.name]
    assert asked == [12] and mine.exists()
