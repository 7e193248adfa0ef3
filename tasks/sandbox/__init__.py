"""Job sandboxes: one interface (start, exec, stop) with a Docker and a bubblewrap backend."""

from __future__ import annotations

from pathlib import Path

from tasks.sandbox.base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError

__all__ = [
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "diagnose",
    "get_backend",
]


def get_backend(
    name: str = "docker", *, runtime: str | None = None, rootfs: Path | None = None
) -> SandboxBackend:
    """The backend named by ONLOOP_SANDBOX_BACKEND: "docker" (with ONLOOP_SANDBOX_RUNTIME,
    e.g. "runsc") or "local" (bubblewrap; `rootfs` an unpacked image to use as root)."""
    if name == "docker":
        from tasks.sandbox.docker_backend import DockerBackend

        return DockerBackend(runtime=runtime)
    if name == "local":
        from tasks.sandbox.local_backend import LocalBackend

        return LocalBackend(rootfs)
    raise SandboxError(f"unknown sandbox backend {name!r}: use 'docker' or 'local'")


def diagnose(backend: str = "docker", image: str = "onloop-sandbox:latest") -> list[str]:
    """What is wrong with the sandbox setup, each with how to fix it (for `onloop doctor`)."""
    import shutil

    problems: list[str] = []
    if backend == "local":
        if not shutil.which("bwrap"):
            problems.append("bubblewrap is missing: apt-get install bubblewrap")
        return problems
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:
        return [f"Docker is not reachable ({exc}): start dockerd, or run .ci/sandbox-setup.sh"]
    from tasks.sandbox.image import content_hash, image_hash

    found = image_hash(client, image)
    if found is None:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            problems.append(f"sandbox image {image} is missing: onloop sandbox build-image")
    elif image == "onloop-sandbox:latest" and found != content_hash():
        problems.append(f"sandbox image {image} is out of date: onloop sandbox build-image")
    return problems
