"""Stopping a command a test started in a session of its own (`onloop dev`, `onloop web`...),
children and all: whatever it leaves running would outlive the suite."""

from __future__ import annotations

import os
import signal
import subprocess


def group_left(pgid: int) -> bool:
    """Whether any process of the group `pgid` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM to the command (started with `start_new_session=True`), up to `timeout` seconds
    for it to exit, then SIGKILL to whatever of its process group is left: its Redis, its web
    and their children."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    if group_left(proc.pid):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
