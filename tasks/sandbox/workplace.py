"""The worker's sandbox backend, mirrors, snapshots and warm pool; the Worker makes one."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from app.core.settings import Settings
from app.policy.org_config import OrgConfigLoader
from app.policy.repo_config import ConfigError
from app.store.db import Database
from app.store.deployment import deployment_id
from app.store.models import Job, JobState
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.allowed import ImageGate
from tasks.sandbox.base import Limits, SandboxBackend
from tasks.sandbox.docker_backend import DockerBackend
from tasks.sandbox.egress.gateway import EgressGateway
from tasks.sandbox.egress.policy import load_credentials
from tasks.sandbox.egress.tls import check_ca_bundle
from tasks.sandbox.factory import get_backend
from tasks.sandbox.pool import WarmPool
from tasks.sandbox.reaper import Clock, reap, reap_workspaces
from tasks.sandbox.snapshots import SnapshotStore

log = logging.getLogger(__name__)


@dataclass
class Workplace:
    backend: SandboxBackend
    cache: RepoCache
    workspaces: Path
    snapshots: SnapshotStore | None = None
    pool: WarmPool | None = None
    gateway: EgressGateway | None = None  # setup's allowlisted egress (Docker only)
    disk_mb: int = 4096  # ONLOOP_SANDBOX_DISK_LIMIT_MB

    def limits(self, timeout: float) -> Limits:
        return Limits(
            job_timeout=timeout, command_timeout=min(600.0, timeout), disk_mb=self.disk_mb
        )

    def close(self) -> None:
        """Remove the warm pool's idle containers (at worker shutdown)."""
        if self.pool is not None:
            self.pool.close()


def make_workplace(settings: Settings, deployment: str = "") -> Workplace:
    """The backend ONLOOP_SANDBOX_BACKEND names, with its mirrors and workspaces under
    ONLOOP_WORK_DIR; on Docker also dependency snapshots, setup egress and the warm pool
    (which starts filling now), all labelled with `deployment`."""
    root = Path(settings.work_dir).resolve()
    (root / "workspaces").mkdir(parents=True, exist_ok=True)
    org = OrgConfigLoader()
    backend = get_backend(
        settings.sandbox_backend,
        runtime=settings.sandbox_runtime,
        rootfs=settings.sandbox_rootfs,
        images=ImageGate(lambda: _images(settings, org)),
        deployment=deployment,
    )
    place = Workplace(backend, RepoCache(root / "mirrors"), root / "workspaces")
    place.disk_mb = settings.sandbox_disk_limit_mb
    if isinstance(backend, DockerBackend):
        place.snapshots = SnapshotStore(
            backend.client, root / "snapshots", max_bytes=settings.snapshot_max_bytes
        )
        place.gateway = EgressGateway(
            backend.client,
            root / "egress",
            proxy_image=settings.sandbox_image,
            cache_dir=root / "download-cache",
            credentials=_credentials(settings),
            upstream_ca=_upstream_ca(settings),
            deployment=deployment,
        )
        if settings.sandbox_pool_size > 0:
            place.pool = WarmPool(
                backend,
                settings.sandbox_image,
                root / "pool",
                size=settings.sandbox_pool_size,
            )
            threading.Thread(target=_fill, args=(place.pool,), daemon=True).start()
    return place


def _images(settings: Settings, org: OrgConfigLoader) -> tuple[str, ...]:
    """The images the operator allows; only the default while the organisation file is
    broken (jobs refuse then anyway: tasks.blueprints.start.effective_config)."""
    try:
        return org.images(settings)
    except ConfigError:
        log.warning("organisation file unusable; only %s may run", settings.sandbox_image)
        return (settings.sandbox_image,)


def _credentials(settings: Settings) -> dict[str, str]:
    """Private index credentials the egress proxy adds (never the sandbox)."""
    path = settings.egress_credentials_file
    return load_credentials(path.read_text()) if path is not None else {}


def _upstream_ca(settings: Settings) -> bytes:
    """CAs besides the public ones that the proxy trusts for HTTPS indexes it intercepts."""
    path = settings.egress_ca_file
    if path is None:
        return b""
    data = path.read_bytes()
    check_ca_bundle(data)  # a bad file fails here, not in every job's proxy
    return data


def _fill(pool: WarmPool) -> None:
    try:
        pool.fill()
    except Exception:
        log.warning("could not fill the warm sandbox pool", exc_info=True)


def reap_sandboxes(
    settings: Settings,
    db: Database,
    backend: SandboxBackend | None = None,
    *,
    now: Clock = time.time,
) -> list[str]:
    """Remove sandbox containers, job networks (Docker) and job workspaces whose job is not
    running, at worker start and periodically; what was removed (workspaces as
    `workspaces/job-…`). A worker killed in a job leaves all of these behind. `backend` is
    the worker's (one is made for Docker when not given); ages are measured with `now`."""

    def is_running(job_id: int) -> bool:
        with db.read() as s:
            state = s.scalar(select(Job.state).where(Job.id == job_id))
        return state in (JobState.QUEUED, JobState.RUNNING)

    removed: list[str] = []
    if settings.sandbox_backend == "docker":
        deployment = deployment_id(db)
        if backend is None:
            backend = get_backend("docker", runtime=settings.sandbox_runtime, deployment=deployment)
        assert isinstance(backend, DockerBackend)
        # First: a container may use a workspace. Only this deployment's: another onloop on
        # the same Docker daemon has job ids of its own database.
        removed = reap(backend.client, is_running, deployment=deployment, now=now)
    root = Path(settings.work_dir).resolve() / "workspaces"  # as `make_workplace` names it
    removed += [f"workspaces/{name}" for name in reap_workspaces(root, is_running, now=now)]
    if removed:
        log.info("reaped sandboxes: %s", ", ".join(removed))
    return removed
