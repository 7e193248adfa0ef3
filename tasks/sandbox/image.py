"""Builds the default sandbox image: `docker build` if the base pulls, else mmdebstrap + import."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import docker
import docker.errors

DEFAULT_TAG = "onloop-sandbox:latest"
HASH_LABEL = "onloop.sandbox.content-hash"
CONTEXT_FILES = ("Dockerfile", "packages.txt", "tools.txt", "build-rootfs.sh")
# Instructions that `docker import --change` accepts; the rest of the Dockerfile is the
# rootfs script's business.
_IMPORTABLE = ("ENV", "USER", "WORKDIR", "CMD", "ENTRYPOINT", "LABEL")


class BuildError(RuntimeError):
    """The image could not be built."""


@dataclass
class BuildResult:
    """What `build_image` did."""

    tag: str
    content_hash: str
    method: str  # "cached", "docker" or "rootfs"
    seconds: float


def context_dir() -> Path:
    """config/sandbox of this checkout, or $ONLOOP_SANDBOX_CONTEXT."""
    env = os.environ.get("ONLOOP_SANDBOX_CONTEXT")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "config" / "sandbox"


def content_hash(context: Path | None = None) -> str:
    """A hash of everything that decides the image's content."""
    context = context or context_dir()
    digest = hashlib.sha256()
    for name in CONTEXT_FILES:
        digest.update(name.encode() + b"\0" + (context / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def image_hash(client: docker.DockerClient, tag: str) -> str | None:
    """The content hash label of the image `tag`, or None when there is no such image."""
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return (image.labels or {}).get(HASH_LABEL)


def dockerfile_changes(text: str) -> list[str]:
    """The Dockerfile's ENV/USER/WORKDIR/CMD/ENTRYPOINT/LABEL lines, for `docker import`."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        lines.append(current + line)
        current = ""
    return [line for line in lines if line.split(" ", 1)[0].upper() in _IMPORTABLE]


def split_tag(ref: str) -> tuple[str, str]:
    """`repo:tag` as (repo, tag); the tag is "latest" when there is none."""
    repository, sep, version = ref.rpartition(":")
    if not sep or "/" in version:
        return ref, "latest"
    return repository, version


def base_image(context: Path) -> str:
    """The Dockerfile's FROM."""
    for line in (context / "Dockerfile").read_text().splitlines():
        if line.upper().startswith("FROM "):
            return line.split()[1]
    raise BuildError("the Dockerfile has no FROM")


def _can_get(client: docker.DockerClient, image: str, say: Callable[[str], None]) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        pass
    try:
        say(f"pulling {image} ...")
        client.images.pull(image)
        return True
    except docker.errors.APIError as exc:
        say(f"cannot pull {image} ({exc.explanation}); building from a Debian rootfs instead")
        return False


def build_with_docker(client: docker.DockerClient, context: Path, tag: str, digest: str) -> None:
    """`docker build` of config/sandbox/Dockerfile."""
    try:
        client.images.build(
            path=str(context), tag=tag, labels={HASH_LABEL: digest}, rm=True, forcerm=True
        )
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        raise BuildError(f"docker build failed: {exc}") from exc


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    yield from iter(lambda: stream.read(1 << 20), b"")


def _scratch_dir() -> str:
    """Where mmdebstrap builds the tree: a tmpfs when there is room (creating its ~20,000
    files on disk is most of the build's time), else the usual temporary directory."""
    chosen = os.environ.get("ONLOOP_ROOTFS_TMPDIR")
    if chosen:
        return chosen
    shm = "/dev/shm"  # noqa: S108 - a tmpfs the build makes its own private directory in
    try:
        free = os.statvfs(shm)
        if free.f_bavail * free.f_frsize > 3 * 2**30 and os.access(shm, os.W_OK):
            return shm
    except OSError:
        pass
    return tempfile.gettempdir()


def build_from_rootfs(
    client: docker.DockerClient, context: Path, tag: str, digest: str, say: Callable[[str], None]
) -> None:
    """mmdebstrap a rootfs (config/sandbox/build-rootfs.sh) and `docker import` it with the
    Dockerfile's ENV, USER, WORKDIR and CMD: no registry needed, only Debian's and PyPI."""
    with tempfile.TemporaryDirectory(prefix="onloop-image-") as tmp:
        wheels = Path(tmp) / "wheels"
        say("downloading the tools' wheels ...")
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
        done = subprocess.run(
            [*pip, "-d", str(wheels), "-r", str(context / "tools.txt")],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise BuildError(f"pip download failed: {done.stderr.strip()[-2000:]}")
        say("building the rootfs with mmdebstrap (about a minute) ...")
        log_path = Path(tmp) / "mmdebstrap.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                ["bash", str(context / "build-rootfs.sh"), str(wheels)],
                stdout=subprocess.PIPE,
                stderr=log_file,
                env={**os.environ, "TMPDIR": _scratch_dir()},
            )
            assert proc.stdout is not None
            changes = [*dockerfile_changes((context / "Dockerfile").read_text())]
            changes.append(f"LABEL {HASH_LABEL}={digest}")
            repository, version = split_tag(tag)
            try:
                client.api.import_image(
                    src=_chunks(proc.stdout),
                    repository=repository,
                    tag=version,
                    changes=changes,
                    stream_src=True,
                )
            finally:
                proc.stdout.close()
                code = proc.wait()
        if code != 0:
            raise BuildError(f"build-rootfs.sh failed:\n{log_path.read_text()[-3000:]}")


def build_image(
    tag: str | None = None,
    *,
    method: str = "auto",
    force: bool = False,
    client: docker.DockerClient | None = None,
    say: Callable[[str], None] = print,
) -> BuildResult:
    """Build the default sandbox image as `tag`, unless an image of that tag with the same
    content hash exists already. `method`: "auto", "docker" or "rootfs"."""
    begun = time.monotonic()
    tag = tag or os.environ.get("ONLOOP_SANDBOX_IMAGE") or DEFAULT_TAG
    client = client or docker.from_env(timeout=1800)
    context = context_dir()
    digest = content_hash(context)
    if not force and image_hash(client, tag) == digest:
        return BuildResult(tag, digest, "cached", time.monotonic() - begun)
    old = _image_id(client, tag)
    if method == "auto":
        method = "docker" if _can_get(client, base_image(context), say) else "rootfs"
    if method == "docker":
        build_with_docker(client, context, tag, digest)
    elif method == "rootfs":
        build_from_rootfs(client, context, tag, digest, say)
    else:
        raise BuildError(f"unknown build method {method!r}")
    if image_hash(client, tag) != digest:
        raise BuildError(f"the built image {tag} does not carry content hash {digest}")
    client.images.get(tag).tag(split_tag(tag)[0], f"c-{digest}")  # pinned by content too
    if old and old != _image_id(client, tag):
        try:  # the image this one replaces, unless something still uses or names it
            client.images.remove(old, noprune=False)
        except docker.errors.APIError:
            pass
    return BuildResult(tag, digest, method, time.monotonic() - begun)


def _image_id(client: docker.DockerClient, tag: str) -> str | None:
    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None
