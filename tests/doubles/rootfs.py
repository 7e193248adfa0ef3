"""A tiny root file system for bubblewrap tests: the host's /bin/sh and its libraries, the
mount points bwrap needs, and a planted `setpriv` that says when it ran (and with what)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

# Planted where a sandbox root's PATH finds `setpriv`. If it ever runs, it copies `/secret`
# (a file only root may read) and its own capabilities into the workspace, then execs the
# command after `--` as the real setpriv would have.
PLANTED_SETPRIV = """#!/bin/sh
while read -r line; do echo "$line"; done < /secret > /workspace/leaked 2>/dev/null
while read -r line; do
  case "$line" in Cap*) echo "$line";; esac
done < /proc/self/status > /workspace/setpriv-ran
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""
SECRET = "the-app-private-key"
MOUNT_POINTS = ("proc", "dev", "tmp", "workspace", "etc/ssl", "usr/bin")


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"(/\S+)\s+\(0x", out)


def tiny_rootfs(root: Path, *, secret: str = SECRET) -> Path:
    """`root` made into a root file system in which `sh` (and nothing else) runs, with a
    root-only `/secret` and the planted `setpriv` in /bin and /usr/bin."""
    sh = os.path.realpath("/bin/sh")
    for path in (sh, *_libraries(sh)):
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "sh").exists():
        shutil.copy2(sh, root / "bin" / "sh")
    for name in MOUNT_POINTS:
        (root / name).mkdir(parents=True, exist_ok=True)
    for name in ("passwd", "group", "hostname"):
        (root / "etc" / name).write_text("")
    for where in ("bin", "usr/bin"):
        planted = root / where / "setpriv"
        planted.write_text(PLANTED_SETPRIV)
        planted.chmod(0o755)
    (root / "secret").write_text(secret)
    (root / "secret").chmod(0o600)
    (root / "onloop-rootfs").write_text("the operator's rootfs\n")
    root.chmod(0o755)
    return root
