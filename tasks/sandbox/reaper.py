"""The reaper: removes every onloop container, job network and job workspace whose job is no longer
running."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import docker
import docker.errors

from tasks.sandbox.docker_backend import (
    DEPLOYMENT_LABEL,
    HOST_LABEL,
    JOB_LABEL,
    POOL_LABEL,
    remove_container,
)
from tasks.sandbox.egress.gateway import remove_network

log = logging.getLogger(__name__)

IsRunning = Callable[[int], bool]  # is the job with this id queued or running?
Clock = Callable[[], float]  # the Unix time now; the ages of containers are measured with it


def process_token(pid: int | None = None) -> str:
    """`host:pid:start-time` for a process, so a reused pid is not taken for the old one."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid)}"


def process_start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot, or '' if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(owner: str, *, max_age: float, age: float) -> bool:
    """Whether the worker process that started an idle pool container still lives."""
    host, _, rest = owner.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != socket.gethostname():
        return age < max_age  # another host's pool: we cannot see its processes
    if not pid_text.isdigit():
        return False
    return process_start_time(int(pid_text)) == started != ""


def job_id_of(text: str) -> int | None:
    """The job id a label or a name holds, or None: then no job runs in what carries it."""
    return int(text) if text.isascii() and text.isdigit() else None


def _still_running(is_running: IsRunning, job: str, what: object) -> bool | None:
    """Whether the job that `job` (a label, or part of a name) names runs; None when the
    database cannot say, and `what` is kept for now."""
    job_id = job_id_of(job)
    if job_id is None:
        return False
    try:
        return is_running(job_id)
    except Exception:
        log.warning("reaper: cannot tell whether job %s runs; keeping %s", job, what)
        return None


def job_from_name(name: str) -> str | None:
    """The job in a claimed pool container's name (`onloop-job-<id>--<suffix>`)."""
    if name.startswith("onloop-job-") and "--" in name:
        return name[len("onloop-job-") :].rsplit("--", 1)[0]
    return None


def owned(deployment: str) -> dict[str, list[str]]:
    """Docker's filter for what onloop made, and of one deployment when given: labels in a
    list must all match (https://docs.docker.com/reference/cli/docker/container/ls/#label)."""
    labels = [JOB_LABEL] + ([f"{DEPLOYMENT_LABEL}={deployment}"] if deployment else [])
    return {"label": labels}


def reap(
    client: docker.DockerClient,
    is_running: IsRunning,
    *,
    deployment: str = "",
    min_age: float = 60.0,
    pool_max_age: float = 86400.0,
    now: Clock = time.time,
) -> list[str]:
    """Remove onloop's containers whose job is not running; the removed containers' names.

    `is_running(job_id)` answers from the database (queued or running counts as running).
    Containers younger than `min_age` seconds are left alone, so a job that is starting is
    never raced. Idle pool containers go when the worker process that made them is gone.
    With `deployment`, only that deployment's: job ids are another database's elsewhere.
    """
    removed: list[str] = []
    at = now()
    for info in client.api.containers(all=True, filters=owned(deployment)):
        labels: dict[str, str] = info.get("Labels") or {}
        name = (info.get("Names") or ["/?"])[0].lstrip("/")
        age = at - float(info.get("Created", at))
        job = labels.get(JOB_LABEL) or job_from_name(name)
        if job:
            if age < min_age:
                continue
            keep = _still_running(is_running, job, name)
            if keep is None:  # the database cannot say: kept for now
                continue
        elif labels.get(POOL_LABEL):
            keep = owner_alive(labels[POOL_LABEL], max_age=pool_max_age, age=age)
        else:
            keep = False
        if keep:
            continue
        try:
            if remove_container(client, info["Id"]):
                removed.append(name)
                log.info("reaper removed %s (job %s, host %s)", name, job, labels.get(HOST_LABEL))
        except docker.errors.APIError:
            log.warning("reaper could not remove %s", name, exc_info=True)
    networks = reap_networks(client, is_running, deployment=deployment, min_age=min_age, now=now)
    return removed + networks


def created_at(text: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, Z or an offset) as a Unix time; 0 if unreadable."""
    head, dot, rest = text.strip().replace("Z", "+00:00").partition(".")
    if dot:  # Python takes at most microseconds
        digits = "".join(c for c in rest if c.isdigit())
        head += "." + digits[:6] + rest[len(digits) :]
    try:
        stamp = datetime.fromisoformat(head)
    except ValueError:
        return 0.0
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def reap_networks(
    client: docker.DockerClient,
    is_running: IsRunning,
    *,
    deployment: str = "",
    min_age: float = 60.0,
    now: Clock = time.time,
) -> list[str]:
    """Remove setup networks (egress/gateway.py) whose job is not running; their names.
    Their proxies are containers with the job's label, removed by `reap` just before."""
    removed: list[str] = []
    at = now()
    for info in client.api.networks(filters=owned(deployment)):
        job = (info.get("Labels") or {}).get(JOB_LABEL, "")
        name = str(info.get("Name", "?"))
        if at - created_at(str(info.get("Created", ""))) < min_age:
            continue
        if job and _still_running(is_running, job, name) is not False:
            continue
        try:
            if remove_network(client, str(info["Id"])):
                removed.append(name)
                log.info("reaper removed network %s (job %s)", name, job)
        except docker.errors.APIError:
            log.warning("reaper could not remove network %s", name, exc_info=True)
    return removed


def job_from_workspace(name: str) -> str | None:
    """The job in a workspace's name (`job-<id>-<mkdtemp suffix>`, tasks/sandbox/job.py);
    the suffix has no dash, the id may."""
    rest = name[len("job-") :] if name.startswith("job-") else ""
    return (rest.rsplit("-", 1)[0] or None) if "-" in rest else None


def reap_workspaces(
    root: Path, is_running: IsRunning, *, min_age: float = 60.0, now: Clock = time.time
) -> list[str]:
    """Remove the job workspaces under `root` whose job is not running (a worker killed in a
    job never ran its cleanup); their names. Ones changed within `min_age` seconds stay, so a
    job that is starting is never raced."""
    removed: list[str] = []
    at = now()
    for path in sorted(root.glob("job-*")):
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode) or at - info.st_mtime < min_age:
            continue
        job = job_from_workspace(path.name)
        if job and _still_running(is_running, job, path) is not False:
            continue
        remove_tree(path)
        if os.path.lexists(path):
            log.warning("reaper could not remove workspace %s", path)
        else:
            removed.append(path.name)
            log.info("reaper removed workspace %s (job %s)", path.name, job)
    return removed


def remove_tree(path: Path) -> None:
    """rmtree, as a job's own cleanup does, that also gets through directories the sandbox
    made read-only: a root worker chowned the files to the sandbox uid and may remove them
    anyway; a worker that is not root ran the commands as itself and owns what they made,
    so it may make such a directory writable again. Symlinks are never followed."""

    def retry(func: Callable[..., object], name: str, _exc: object) -> None:
        parent = os.path.dirname(name)
        try:
            if stat.S_ISDIR(os.lstat(parent).st_mode):
                os.chmod(parent, 0o700)
            if func is os.rmdir or func is os.unlink:
                func(name)
            elif stat.S_ISDIR(os.lstat(name).st_mode):  # os.open/scandir of an unreadable dir
                os.chmod(name, 0o700)
                shutil.rmtree(name, onerror=retry)
        except OSError:
            pass  # left for the warning the caller gives

    shutil.rmtree(path, onerror=retry)
