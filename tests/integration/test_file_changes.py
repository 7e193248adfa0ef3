"""A commit read from a real git repository as createCommitOnBranch's file changes."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from tasks.git.file_changes import NotExpressible, file_changes


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
    }
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_additions_deletions_and_binary_contents(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "old.txt").write_text("x\n")
    (tmp_path / "keep.txt").write_text("k\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "base")
    (tmp_path / "old.txt").unlink()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "bin").write_bytes(b"\x00\xffz")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "Fix it", "-m", "Onloop-Job: 3")
    got = file_changes(tmp_path, _git(tmp_path, "rev-parse", "HEAD"))
    assert (got.headline, got.body) == ("Fix it", "Onloop-Job: 3")
    assert got.deletions == [{"path": "old.txt"}]
    assert got.additions == [
        {"path": "dir/bin", "contents": base64.b64encode(b"\x00\xffz").decode()}
    ]
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "exec")
    with pytest.raises(NotExpressible, match="mode 100755"):
        file_changes(tmp_path, _git(tmp_path, "rev-parse", "HEAD"))
