"""The Docker sandbox: one locked-down container per job, commands run in it with `exec`."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from tasks.sandbox.base import (
    ExecResult,
    Limits,
    Sandbox,
    SandboxBackend,
    SandboxError,
    TailBuffer,
    chown_tree,
)
from tasks.sandbox.docker_spec import (
    DEPLOYMENT_LABEL,
    HOST_LABEL,
    INIT_UID,
    JOB_LABEL,
    POOL_LABEL,
    container_name,
    create_kwargs,
    exec_ids,
)

log = logging.getLogger(__name__)
__all__ = [  # the container's spec lives in tasks.sandbox.docker_spec; callers import it here
    "DEPLOYMENT_LABEL",
    "HOST_LABEL",
    "INIT_UID",
    "JOB_LABEL",
    "POOL_LABEL",
    "DockerBackend",
    "DockerSandbox",
    "ImageCheck",
    "container_name",
    "create_kwargs",
    "exec_ids",
    "remove_container",
]

START_PAUSES = (0.2, 1.0)  # seconds before each new try of a command docker did not start
KILL_ALL = ["/bin/sh", "-c", "kill -KILL -1"]  # every process of the command's uid but itself
# Why an image may not run (None: it may); tasks.sandbox.allowed.ImageGate is the worker's.
ImageCheck = Callable[[docker.DockerClient, str], str | None]


class DockerSandbox(Sandbox):
    """A running container for one job; removed by `stop`, at its deadline, or by the reaper."""

    backend_name = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        container: Container,
        job_id: int,
        workspace: Path,
        limits: Limits,
    ) -> None:
        super().__init__(job_id, workspace, limits)
        self.client = client
        self.container = container
        self.container_id: str = container.id or ""
        uid, gid = exec_ids(limits)
        self.user = f"{uid}:{gid}"
        self._lock = threading.Lock()
        self._watchdog = threading.Timer(limits.job_timeout, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _expire(self) -> None:
        log.warning("job %s reached its time limit; removing its sandbox", self.job_id)
        self.stop()

    def _exec(
        self, args: list[str], timeout: float, env: dict[str, str], workdir: str
    ) -> ExecResult:
        """Run one command; one docker could not start is tried again (START_PAUSES), since
        under load the daemon fails a start now and then that the next one makes."""
        begun = time.monotonic()
        for pause in START_PAUSES:
            left = timeout - (time.monotonic() - begun)
            result, started = self._exec_once(args, left, env, workdir)
            if started or self.stopped or left <= pause:
                return result
            log.warning(
                "docker could not start a command in job %s's sandbox; trying again: %s",
                self.job_id,
                result.stderr.strip()[-500:],
            )
            time.sleep(pause)
        return self._exec_once(args, timeout - (time.monotonic() - begun), env, workdir)[0]

    def _exec_once(
        self, args: list[str], timeout: float, env: dict[str, str], workdir: str
    ) -> tuple[ExecResult, bool]:
        """One try of a command, and whether its process started at all."""
        api = self.client.api
        begun = time.monotonic()
        out = TailBuffer(self.limits.output_bytes, partial(self.stream, "stdout"))
        err = TailBuffer(self.limits.output_bytes, partial(self.stream, "stderr"))
        try:
            exec_id = api.exec_create(
                self.container_id, args, environment=env, workdir=workdir, user=self.user
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.APIError as exc:
            if self.stopped:
                raise SandboxError(f"sandbox for job {self.job_id} was stopped") from exc
            # e.g. no pid left for the command: the sandbox is still there, the command is not
            return ExecResult(126, stderr=f"could not start the command: {exc.explanation}"), False

        def pump() -> None:
            try:
                for o, e in stream:
                    if o:
                        out.add(o)
                    if e:
                        err.add(e)
            except Exception:  # the container went away under us
                log.debug("exec stream ended early", exc_info=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        reader.join(timeout)
        timed_out = reader.is_alive()
        if timed_out:
            if not self.kill_processes():
                self.stop()
            reader.join(10)
            if reader.is_alive():
                self.stop()
                reader.join(10)
        code, started = -1, True
        timed_out = timed_out or self.stopped  # removed at the job's deadline meanwhile
        if timed_out:
            gone = " (the sandbox was removed)" if self.stopped else ""
            err.add(f"\nonloop: command timed out after {timeout:g}s{gone}\n".encode())
        else:
            code, started = self._exit_code(exec_id)
        if not started:
            # The daemon writes why a start failed to the stream's stdout (exit 126), e.g.
            # "OCI runtime exec failed: ...": it is docker's, not the command's, output.
            said = out.text().strip() or f"exit {code}"
            return ExecResult(126, stderr=f"could not start the command: {said}"), False
        return ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            duration=time.monotonic() - begun,
            truncated=out.truncated or err.truncated,
        ), True

    def _exit_code(self, exec_id: str) -> tuple[int, bool]:
        """The command's exit code, and False if its process never started (no pid)."""
        for _ in range(50):
            try:
                info = self.client.api.exec_inspect(exec_id)
            except docker.errors.APIError:
                return -1, True
            if info.get("ExitCode") is not None and not info.get("Running"):
                return int(info["ExitCode"]), bool(info.get("Pid"))
            time.sleep(0.02)
        return -1, True

    def kill_processes(self, attempts: int = 5) -> bool:
        """Kill every process the commands started, keeping the container; False if not
        even the kill could start (e.g. a fork bomb holds every pid)."""
        for attempt in range(attempts):
            if self.stopped:
                return False
            try:
                done = self.container.exec_run(KILL_ALL, user=self.user)
                if done.exit_code in (0, 1):  # 1: nothing was left to kill
                    return True
            except docker.errors.APIError:
                pass
            time.sleep(0.2 * (attempt + 1))
        return False

    def used_bytes(self) -> int:
        """The workspace and the container's writable layer (setup's, for a snapshot)."""
        found = self.client.api.containers(
            all=True, size=True, filters={"id": self.container_id}
        )  # the list endpoint is the SDK's one way to ask Docker for `SizeRw`
        return super().used_bytes() + sum(int(c.get("SizeRw") or 0) for c in found)

    def commit(self, repository: str, tag: str, labels: dict[str, str]) -> str:
        """Save the container's file system as an image (the warm snapshot); its id."""
        image = self.container.commit(repository=repository, tag=tag, conf={"Labels": labels})
        return str(image.id)

    def stop(self) -> None:
        """Remove the container, whatever state it is in."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
        self._halt.set()
        self._watchdog.cancel()
        remove_container(self.client, self.container_id)


def remove_container(client: docker.DockerClient, container_id: str) -> bool:
    """Force-remove one container; True if it was there."""
    try:
        client.api.remove_container(container_id, force=True, v=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if "removal of container" in str(exc) and "already in progress" in str(exc):
            return False
        raise


NON_ROOT_SETUP = (
    "setup as the image's setup user: under a non-root worker setup runs as the worker's uid, "
    "which cannot install into the image's /opt/venv (the setup user's); install into the "
    "workspace, or run the worker as root"
)


class DockerBackend(SandboxBackend):
    """Starts job sandboxes as Docker containers (optionally under another runtime: runsc).
    With `images`, a container starts only from an image that check lets through (the
    worker's: the operator's list and onloop's own snapshots of those)."""

    name = "docker"
    limitations: tuple[str, ...] = ()

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        runtime: str | None = None,
        images: ImageCheck | None = None,
        deployment: str = "",
    ) -> None:
        self.client = client or docker.from_env(timeout=120)
        self.deployment = deployment  # labelled on everything it makes (reaper.py)
        self.runtime = runtime or None
        self.host = socket.gethostname()
        self.images = images
        if os.geteuid() != 0:  # commands run as the worker's own uid (docker_spec.exec_ids)
            self.limitations = (NON_ROOT_SETUP,)
            self.warn_limitations()

    def labels(self, job_id: int) -> dict[str, str]:
        """The labels every job container carries."""
        return {JOB_LABEL: str(job_id), **self.owner_labels()}

    def owner_labels(self) -> dict[str, str]:
        """Who made a container: this host, and this deployment when it has an id."""
        return {HOST_LABEL: self.host} | (
            {DEPLOYMENT_LABEL: self.deployment} if self.deployment else {}
        )

    def prepare(self, workspace: Path, limits: Limits) -> None:
        """Hand the workspace to the sandbox's user (only needed when the worker is root)."""
        if not workspace.is_dir():
            raise SandboxError(f"workspace {workspace} is not a directory")
        if os.geteuid() == 0 and limits.uid != 0:
            chown_tree(workspace, limits.uid, limits.gid)

    def start(
        self,
        job_id: int,
        image: str,
        workspace: Path,
        limits: Limits | None = None,
        *,
        writable_root: bool = False,
        network: str | None = None,
        mounts: Sequence[Mount] = (),
    ) -> DockerSandbox:
        """A running, locked-down container for `job_id`, workspace at /workspace; on no
        network, or (setup only) on `network` with extra `mounts` such as the download cache."""
        limits = limits or Limits()
        if limits.uid == 0:
            raise SandboxError("sandbox commands never run as root")
        workspace = workspace.resolve()
        self.prepare(workspace, limits)
        kwargs = create_kwargs(
            image,
            workspace,
            limits,
            self.labels(job_id),
            container_name(job_id),
            runtime=self.runtime,
            writable_root=writable_root,
            network=network,
            mounts=mounts,
        )
        container = self.run(kwargs)
        return DockerSandbox(self.client, container, job_id, workspace, limits)

    def run(self, kwargs: dict[str, Any]) -> Container:
        """Create and start one container (never pulling); nothing is left if that fails."""
        refused = self.images(self.client, kwargs["image"]) if self.images else None
        if refused:
            raise SandboxError(refused)
        try:
            container = self.client.containers.create(**kwargs)
            container.start()
            return container
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"sandbox image {kwargs['image']!r} not found: run `onloop sandbox build-image`"
            ) from exc
        except docker.errors.APIError as exc:
            self._remove_by_name(kwargs["name"])
            raise SandboxError(f"could not start sandbox {kwargs['name']}: {exc}") from exc

    def _remove_by_name(self, name: str) -> None:
        try:
            remove_container(self.client, name)
        except docker.errors.APIError:
            log.warning("could not remove half-created container %s", name, exc_info=True)
