"""A sandbox that writes past its disk limit is stopped, and the job hears why in words."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from app.store.models import JobState
from tasks.runner.outcomes import outcome_of
from tasks.sandbox.base import DiskLimitExceeded, Limits
from tasks.sandbox.disk import disk_usage
from tasks.sandbox.docker_backend import DockerBackend
from tests.doubles.sandboxes import StartFn, new_job_id

SMALL = Limits(command_timeout=120, disk_mb=5, disk_check_seconds=0.2)
WRITE_20MB = "dd if=/dev/zero of={path} bs=1M count=20 2>/dev/null; sleep 60; echo done"


def test_a_workspace_that_grows_past_the_limit_stops_the_sandbox(start: StartFn) -> None:
    box = start(limits=SMALL)
    assert box.exec(["sh", "-c", "echo small > /workspace/small"]).ok  # under the limit
    begun = time.monotonic()
    with pytest.raises(DiskLimitExceeded) as err:
        box.exec(["sh", "-c", WRITE_20MB.format(path="/workspace/big")])
    assert time.monotonic() - begun < 30  # stopped while writing, not at the command's end
    assert "workspace grew past 5 MB" in err.value.message
    assert box.stopped
    with pytest.raises(DiskLimitExceeded):  # and every later command hears the same
        box.exec(["true"])
    state, result = outcome_of(err.value, None)  # type: ignore[arg-type]
    assert state == JobState.FAILED and result["error"] == err.value.message


@pytest.mark.docker
def test_the_containers_own_writable_layer_counts_too(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    """Setup for a snapshot writes into the container's layer, not the workspace."""
    box = DockerBackend(docker_client).start(
        new_job_id(), image, tmp_path, SMALL, writable_root=True
    )
    with box, pytest.raises(DiskLimitExceeded):
        box.exec(["sh", "-c", WRITE_20MB.format(path="/var/tmp/big")])
    assert disk_usage(tmp_path, 0) < 2**20  # the workspace itself stayed small


def test_hard_links_count_once_and_the_repo_caches_not_at_all(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 2**20)
    (tmp_path / "b").hardlink_to(tmp_path / "a")
    owner = (tmp_path / "a").stat().st_uid
    assert 2**20 <= disk_usage(tmp_path, owner) < 2 * 2**20
    assert disk_usage(tmp_path, owner + 1) < 2**20 / 2  # someone else's links: shared


NOBODY = 65534
MEASURE = (
    "import sys; from pathlib import Path; from tasks.sandbox.disk import disk_usage; "
    "print(disk_usage(Path(sys.argv[1]), {uid}))"
)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_directory_made_unreadable_is_still_counted() -> None:
    """Under a non-root worker the sandbox's files are the worker's own: `chmod 000` on a
    directory must not hide what is under it from the watch (measured here as that uid)."""
    root = Path(tempfile.mkdtemp(prefix="onloop-disk-", dir="/tmp"))
    try:
        hidden = root / "d"
        hidden.mkdir()
        (hidden / "big").write_bytes(b"x" * 4 * 2**20)
        for path in (root, hidden, hidden / "big"):
            os.chown(path, NOBODY, NOBODY)
        root.chmod(0o755)
        hidden.chmod(0)
        done = subprocess.run(
            [
                *("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"),
                *(sys.executable, "-c", MEASURE.format(uid=NOBODY), str(root)),
            ],
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[3]), "PATH": "/usr/bin:/bin"},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert int(done.stdout) >= 4 * 2**20
    finally:
        shutil.rmtree(root, ignore_errors=True)
