"""What a job container is made of: its name, labels, uids and locked-down create arguments."""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docker.types import Mount

from tasks.sandbox.base import TMP, WORKDIR, Limits

JOB_LABEL = "onloop.job"
HOST_LABEL = "onloop.host"
POOL_LABEL = "onloop.pool"
DEPLOYMENT_LABEL = "onloop.deployment"  # whose sandbox: the reaper touches only its own
INIT_UID = 65534  # the container's own idle process; commands run as another uid


def container_name(job_id: int) -> str:
    """A unique, valid container name that starts with the job id (the reaper reads it)."""
    return f"onloop-job-{job_id}--{secrets.token_hex(3)}"


def exec_ids(limits: Limits) -> tuple[int, int]:
    """The uid:gid commands run as: the limit's when the worker is root (it chowns the
    workspace), else the worker's own, so the workspace stays the worker's to clean up."""
    if os.geteuid() == 0:
        return limits.uid, limits.gid
    return os.geteuid(), os.getegid()


def create_kwargs(
    image: str,
    workspace: Path,
    limits: Limits,
    labels: dict[str, str],
    name: str,
    *,
    runtime: str | None = None,
    writable_root: bool = False,
    lifetime: float | None = None,
    network: str | None = None,
    mounts: Sequence[Mount] = (),
) -> dict[str, Any]:
    """Everything that locks a container down, in the Docker SDK's words."""
    uid, _ = exec_ids(limits)
    init_uid = INIT_UID if uid != INIT_UID else INIT_UID - 1
    kwargs: dict[str, Any] = {
        "image": image,
        "entrypoint": ["sleep"],
        "command": [str(int(lifetime if lifetime is not None else limits.job_timeout + 60))],
        "name": name,
        "labels": labels,
        "init": True,  # docker-init reaps orphans, so killed commands free their pids
        "user": f"{init_uid}:{init_uid}",
        "working_dir": WORKDIR,
        "environment": {"HOME": TMP},
        "hostname": "sandbox",
        "network_mode": "none",
        "read_only": not writable_root,
        "tmpfs": {TMP: f"rw,nosuid,nodev,size={limits.tmp_mb}m,mode=1777"},
        "mounts": [Mount(target=WORKDIR, source=str(workspace), type="bind"), *mounts],
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "ipc_mode": "private",
        "pids_limit": limits.pids,
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
    }
    if network:  # setup's job network (tasks/sandbox/egress/gateway.py); otherwise none at all
        del kwargs["network_mode"]
        kwargs["network"] = network
    if runtime:
        kwargs["runtime"] = runtime
    return kwargs
