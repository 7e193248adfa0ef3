"""The rebase floor in a sandbox, with no onloop: what the sandbox rule alone costs a rebase.

bench/e2e.py's rebase floor runs `git rebase` on the host. onloop must run it in a sandbox
(design.md: nothing from a pull request runs outside one), so any rebase also pays for
bringing the commits into a workspace, one `docker exec` in a warm container, and carrying
the result back out through a bundle. This floor runs exactly those commands and nothing
else (no GitHub reads, policy, guard or report): the least a sandboxed rebase takes here.
"""

from __future__ import annotations

import random
import time

import docker

from bench.e2e_floor import Floor
from tasks.sandbox.base import Limits
from tasks.sandbox.commits import BUNDLE, run_then_bundle
from tasks.sandbox.docker_backend import DockerBackend

IDENTITY = {
    "GIT_AUTHOR_NAME": "alice",
    "GIT_AUTHOR_EMAIL": "alice@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "alice",
    "GIT_COMMITTER_EMAIL": "alice@users.noreply.github.com",
}


class SandboxedRebase:
    """A bare mirror, a workspace cloned from it and a running sandbox on that workspace,
    all made ahead (as onloop's mirror and warm pool are); `rebase` is timed."""

    def __init__(self, floor: Floor, image: str) -> None:
        self.floor, self.backend = floor, DockerBackend(docker.from_env())
        self.mirror, self.workspace = floor.root / "sbx-mirror.git", floor.root / "sbx-ws"
        floor.git(["clone", "-q", "--bare", floor.url, str(self.mirror)])
        floor.git(["clone", "-q", "--no-checkout", str(self.mirror), str(self.workspace)])
        self.limits = Limits()
        job = random.randrange(10**9, 2 * 10**9)  # no database holds it: no reaper keeps it
        self.box = self.backend.start(job, image, self.workspace, self.limits)

    def close(self) -> None:
        self.box.stop()
        self.backend.client.close()

    def rebase(self, branch: str, old: str) -> float:
        """Mirror fetch; the workspace moved to `branch` and handed to the sandbox's user;
        rebase and bundle in one exec; the bundle into the mirror; push with a lease on `old`."""
        floor, mirror = self.floor, str(self.mirror)
        ws = ["-c", "safe.directory=*", "-C", str(self.workspace)]
        begun = time.perf_counter()
        floor.git(["-C", mirror, "fetch", "-q", "--prune", floor.url, "+refs/heads/*:refs/heads/*"])
        floor.git([*ws, "fetch", "-q", mirror, "+refs/heads/*:refs/remotes/origin/*"])
        floor.git([*ws, "checkout", "-q", "-B", branch, f"origin/{branch}"])
        self.backend.prepare(self.workspace, self.limits)
        rebase = ["git", "rebase", "-q", "origin/main"]
        done, bundled = run_then_bundle(self.box, rebase, "origin/main", IDENTITY)
        assert done.ok and bundled, done.output
        out = f"refs/floor/{branch}"
        floor.git(["-C", mirror, "fetch", "-q", str(self.workspace / BUNDLE), f"HEAD:{out}"])
        lease = f"--force-with-lease=refs/heads/{branch}:{old}"
        floor.git(["-C", mirror, "push", "-q", lease, floor.url, f"{out}:refs/heads/{branch}"])
        return time.perf_counter() - begun
