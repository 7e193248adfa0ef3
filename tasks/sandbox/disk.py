"""A sandbox's workspace on the host: handed to its user, its size (the repo cache's aside)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path


def files_owner(uid: int) -> int:
    """The uid that owns what the sandbox writes: its own `uid` under a root worker (which
    chowns the workspace to it), else the worker's."""
    return uid if os.geteuid() == 0 else os.geteuid()


def disk_usage(root: Path, owner: int) -> int:
    """Bytes the files under `root` take on disk, each inode once, symlinks not followed.
    A hard link that `owner` does not own is the repo cache's, shared, and not counted."""
    total, seen = 0, set[tuple[int, int]]()
    stack = [str(root)]
    while stack:
        entries = _entries(stack.pop())
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if st.st_uid != owner or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


class Unmeasurable(OSError):
    """A directory of the workspace that cannot be read, even after making it readable: what
    is under it cannot be counted, so the sandbox counts as past its limit."""


def _entries(path: str) -> list[os.DirEntry[str]]:
    """A directory's entries; one the sandbox made unreadable (`chmod 000`, under a non-root
    worker whose uid the sandbox shares) is made readable again first, never skipped."""
    try:
        return list(os.scandir(path))
    except FileNotFoundError:
        return []  # removed meanwhile
    except PermissionError:
        try:
            os.chmod(path, stat.S_IRWXU | os.stat(path, follow_symlinks=False).st_mode)
            return list(os.scandir(path))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise Unmeasurable(f"cannot read {path} to measure it: {exc}") from exc


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the sandbox's user the workspace, leaving shared (hard-linked) files untouched."""
    if shutil.which("find") and shutil.which("chown"):
        shared = ["(", "-type", "d", "-o", "-links", "1", ")"]  # not hard links to the cache
        theirs = ["(", "!", "-uid", str(uid), "-o", "!", "-gid", str(gid), ")"]
        done = subprocess.run(
            [
                "find",
                str(root),
                *shared,
                *theirs,
                "-exec",
                "chown",
                "-h",
                f"{uid}:{gid}",
                "{}",
                "+",
            ],
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                continue  # a hard link into the repo cache: the sandbox must not own it
            os.chown(path, uid, gid, follow_symlinks=False)
