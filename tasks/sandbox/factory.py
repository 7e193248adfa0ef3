"""The sandbox backend ONLOOP_SANDBOX_BACKEND names."""

from __future__ import annotations

from pathlib import Path

from tasks.sandbox.base import SandboxBackend, SandboxError
from tasks.sandbox.docker_backend import DockerBackend, ImageCheck
from tasks.sandbox.local_backend import LocalBackend


def get_backend(
    name: str = "docker",
    *,
    runtime: str | None = None,
    rootfs: Path | None = None,
    images: ImageCheck | None = None,
    deployment: str = "",
) -> SandboxBackend:
    """The backend named by ONLOOP_SANDBOX_BACKEND: "docker" (with ONLOOP_SANDBOX_RUNTIME,
    e.g. "runsc", and `images` deciding which images may run) or "local" (bubblewrap;
    `rootfs` the operator's unpacked image, ONLOOP_SANDBOX_ROOTFS, to use as root).
    `deployment` labels what the Docker backend makes, for this deployment's reaper."""
    if name == "docker":
        return DockerBackend(runtime=runtime, images=images, deployment=deployment)
    if name == "local":
        return LocalBackend(rootfs)
    raise SandboxError(f"unknown sandbox backend {name!r}: use 'docker' or 'local'")
