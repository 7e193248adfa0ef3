"""Whether an image can run the setup proxy: the self-check `onloop doctor` and the worker run."""

from __future__ import annotations

import threading
from typing import Any

import docker
import docker.errors

from tasks.sandbox.base import SandboxError

TOOLS_PYTHON = "/opt/tools/bin/python3"  # where the proxy runs (tasks/sandbox/egress/proxy.py)
# What the proxy imports (plugin.py), run by the image's tools Python: onloop's own text,
# never the image's, so an image cannot pass by printing the mark.
SELF_CHECK = (
    "import proxy\n"
    "from proxy.http.proxy import HttpProxyBasePlugin\n"
    "from proxy.http.parser import HttpParser\n"
    "print('onloop-self-check')\n"
)
MARK = "onloop-self-check"
BUILD_HINT = (
    "build it with `onloop sandbox build-image`, or set ONLOOP_SANDBOX_IMAGE to one it built"
)


class ImageUnfit(SandboxError):
    """The sandbox image lacks the setup proxy's tools: it was not built by
    `onloop sandbox build-image`. `message` says which image, why, and what to do."""

    def __init__(self, image: str, why: str) -> None:
        self.image, self.why = image, why
        self.message = (
            f"the sandbox image {image} cannot run a job's `sandbox.setup` ({why}); "
            f"the operator should {BUILD_HINT}"
        )
        super().__init__(self.message)


def self_check(client: docker.DockerClient, image: str, timeout: int = 120) -> str | None:
    """Why `image` cannot run the setup proxy (no tools Python, no proxy.py), or None when it
    can: SELF_CHECK run in a container of it without network, as nobody, then removed."""
    try:
        container = client.containers.create(
            image,
            entrypoint=[TOOLS_PYTHON, "-c", SELF_CHECK],
            command=[],
            user="65534:65534",
            network_disabled=True,
            labels={"onloop.self-check": "1"},
        )
    except docker.errors.ImageNotFound:
        return "it is not there"
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:  # no such executable: it never started
            if "no such file" in str(exc).lower() or "not found" in str(exc).lower():
                return f"it has no {TOOLS_PYTHON}"
            raise
        status = container.wait(timeout=timeout).get("StatusCode")
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        if status != 0:
            err = container.logs(stdout=False, stderr=True).decode(errors="replace")
            lines = err.strip().splitlines()
            return f"{TOOLS_PYTHON} cannot import proxy.py: {lines[-1] if lines else status}"
        return None if out.startswith(MARK) else f"its self-check printed {out[:80]!r}"
    finally:
        container.remove(force=True)


class CheckedImages:
    """One worker's memo of the images (by id) that passed the self-check: each is checked
    once per worker, and again when its tag points at another image."""

    def __init__(self) -> None:
        self._passed: set[str] = set()
        self._lock = threading.Lock()

    def require(self, client: docker.DockerClient, image: str) -> None:
        """Return if `image` can run the setup proxy; else raise ImageUnfit."""
        image_id = _image_id(client, image)
        with self._lock:
            if image_id is not None and image_id in self._passed:
                return
        why = "it is not there" if image_id is None else self_check(client, image)
        if why is not None:
            raise ImageUnfit(image, why)
        with self._lock:
            self._passed.add(str(image_id))


def _image_id(client: docker.DockerClient, image: str) -> str | None:
    try:
        found: Any = client.images.get(image)
    except docker.errors.ImageNotFound:
        return None
    return str(found.id)
