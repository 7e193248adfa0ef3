"""A warm pool: idle, locked-down containers started ahead, each bound to its own workspace,
which may be primed with a checkout of a repository so its next job only moves it."""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import docker.errors
from docker.models.containers import Container

from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits, SandboxError
from tasks.sandbox.docker_backend import (
    JOB_LABEL,
    POOL_LABEL,
    DockerBackend,
    DockerSandbox,
    container_name,
    create_kwargs,
    remove_container,
)
from tasks.sandbox.reaper import process_start_time, process_token

log = logging.getLogger(__name__)

# Only these limits shape the container itself; the times are enforced per job.
_CONTAINER_LIMITS = ("memory_mb", "cpus", "pids", "tmp_mb", "uid", "gid")


@dataclass
class PoolSlot:
    """An idle container and its workspace: empty, or (`repo` set) a checkout no job has
    touched. Put the job's checkout there, then `activate`; or `discard`."""

    pool: WarmPool
    container: Container
    workspace: Path
    image: str
    repo: str | None = None
    origin: str | None = None  # the checkout's `origin` URL, when primed

    def activate(self, job_id: int, limits: Limits) -> DockerSandbox:
        """The slot's container as the job's sandbox. It is renamed after the job in the
        background (the reaper reads the name; until then it counts as the live pool's)."""
        backend = self.pool.backend
        try:
            backend.prepare(self.workspace, limits)
        except OSError as exc:
            self.discard()
            raise SandboxError(f"could not take a pooled sandbox for job {job_id}") from exc
        sandbox = DockerSandbox(backend.client, self.container, job_id, self.workspace, limits)
        threading.Thread(target=self._rename, args=(job_id,), daemon=True).start()
        return sandbox

    def _rename(self, job_id: int) -> None:
        try:
            self.container.rename(container_name(job_id))
        except docker.errors.APIError:
            log.debug("pooled container gone before it was renamed", exc_info=True)

    def discard(self) -> None:
        """Remove the container and its workspace."""
        remove_container(self.pool.backend.client, self.container.id or "")
        shutil.rmtree(self.workspace, ignore_errors=True)


class WarmPool:
    """Keeps `size` blank slots of one image and one set of limits ready to claim, and up to
    `primed` more holding a checkout of a recently used repository."""

    def __init__(
        self,
        backend: DockerBackend,
        image: str,
        root: Path,
        limits: Limits | None = None,
        *,
        size: int = 1,
        primed: int = 2,
        lifetime: float = 86400.0,
    ) -> None:
        self.backend = backend
        self.image = image
        self.root = root
        self.limits = limits or Limits()
        self.size = size
        self.max_primed = primed
        self.lifetime = lifetime
        self.owner = process_token()
        self._idle: list[PoolSlot] = []
        self._primed: list[PoolSlot] = []  # oldest first
        self._lock = threading.Lock()
        self._filling = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.closed = False
        root.mkdir(parents=True, exist_ok=True)
        self._sweep()

    def _sweep(self) -> None:
        """Remove workspaces that dead worker processes left behind in the pool's root."""
        for path in self.root.glob("slot-*"):
            parts = path.name.split("-")
            if len(parts) >= 4 and parts[1].isdigit():
                if process_start_time(int(parts[1])) != parts[2]:
                    shutil.rmtree(path, ignore_errors=True)

    def matches(self, limits: Limits) -> bool:
        """Whether pooled containers can serve a job with these limits."""
        return all(getattr(limits, n) == getattr(self.limits, n) for n in _CONTAINER_LIMITS)

    def _new_slot(self, image: str | None = None) -> PoolSlot:
        image = image or self.image
        pid, started = self.owner.split(":")[1:3]
        tail = f"{pid}-{started}-{secrets.token_hex(3)}"
        workspace = self.root / f"slot-{tail}"
        workspace.mkdir(mode=0o755)
        labels = {JOB_LABEL: "", POOL_LABEL: self.owner, **self.backend.owner_labels()}
        kwargs = create_kwargs(
            image,
            workspace,
            self.limits,
            labels,
            f"onloop-pool-{tail}",
            runtime=self.backend.runtime,
            lifetime=self.lifetime,
        )
        try:
            container = self.backend.run(kwargs)
        except SandboxError:
            shutil.rmtree(workspace, ignore_errors=True)
            raise
        return PoolSlot(self, container, workspace, image)

    def fill(self) -> int:
        """Start containers until `size` blank slots are idle; how many were started."""
        started = 0
        with self._filling:
            while not self.closed:
                with self._lock:
                    if len(self._idle) >= self.size:
                        break
                slot = self._new_slot()
                with self._lock:
                    if self.closed:
                        slot.discard()
                        break
                    self._idle.append(slot)
                started += 1
        return started

    def _background(self, name: str, fn: object, *args: object) -> threading.Thread:
        def run() -> None:
            try:
                fn(*args)  # type: ignore[operator]
            except Exception:
                log.warning("sandbox pool: %s failed", name, exc_info=True)

        thread = threading.Thread(target=run, name=f"onloop-pool-{name}", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return thread

    def prime(
        self,
        cache: RepoCache,
        repo: str,
        rev: str,
        origin_url: str | None,
        image: str | None = None,
    ) -> None:
        """Check `rev` of `repo` out into a fresh slot (of `image`: the pool's, or e.g. the
        repository's warm snapshot), for that repository's next job."""
        slot = self._new_slot(image)
        try:
            cache.checkout(repo, rev, slot.workspace, origin_url=origin_url)
            self.backend.prepare(slot.workspace, self.limits)
        except Exception:
            slot.discard()
            raise
        slot.repo, slot.origin = repo, origin_url
        with self._lock:
            if self.closed:
                slot.discard()
                return
            stale = [s for s in self._primed if s.repo == repo]
            self._primed = [s for s in self._primed if s.repo != repo] + [slot]  # one a repo
            while len(self._primed) > self.max_primed:
                stale.append(self._primed.pop(0))
        for old in stale:
            old.discard()

    def after_job(
        self, cache: RepoCache, repo: str, rev: str, origin_url: str | None, image: str
    ) -> None:
        """Refill, and prime a slot of `image` for `repo` (in the background)."""
        self._background("fill", self.fill)
        if self.max_primed > 0:
            self._background("prime", self.prime, cache, repo, rev, origin_url, image)

    def settle(self, timeout: float = 120.0) -> None:
        """Wait for background refills and priming (for tests and the bench)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def claim(self, image: str, limits: Limits, repo: str | None = None) -> PoolSlot | None:
        """A slot for this image and these limits, primed for `repo` if there is one, else
        blank; None when there is none. The pool then refills in the background."""
        if self.closed or not self.matches(limits):
            return None
        while True:
            with self._lock:
                primed = [s for s in self._primed if (s.repo, s.image) == (repo, image)]
                if primed and repo is not None:
                    slot: PoolSlot | None = primed[-1]
                    self._primed.remove(primed[-1])
                elif image == self.image and self._idle:
                    slot = self._idle.pop(0)
                else:
                    slot = None
            if slot is None or _running(slot.container):
                break
            slot.discard()
        self._background("fill", self.fill)
        return slot

    def close(self) -> None:
        """Remove every idle container (claimed ones belong to their jobs now)."""
        self.closed = True
        self.settle()
        with self._lock:
            idle, self._idle, self._primed = self._idle + self._primed, [], []
        for slot in idle:
            slot.discard()


def _running(container: Container) -> bool:
    try:
        container.reload()
    except docker.errors.APIError:
        return False
    return container.status == "running"
