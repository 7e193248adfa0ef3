"""Which images a job's container may run: the operator's, and onloop's snapshots of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import docker
import docker.errors

from app.policy.images import WHERE, is_snapshot
from tasks.sandbox.snapshots import KEY_LABEL, REPO_LABEL, SNAPSHOT_LABEL, snapshot_repository


class ImageGate:
    """The Docker backend's own check (defence in depth behind app.policy.images): an image
    runs only when the operator allows it by name, or when it is a dependency snapshot that
    onloop made (its name matches its labels) on top of an allowed image. `allowed` is read
    at every start: the organisation file may change while the worker runs."""

    def __init__(self, allowed: Callable[[], Sequence[str]]) -> None:
        self.allowed = allowed

    def __call__(self, client: docker.DockerClient, image: str) -> str | None:
        """Why `image` may not run; None when it may."""
        allowed = list(self.allowed())
        if is_snapshot(image):
            return self._snapshot(client, image, allowed)
        if image in allowed:
            return None
        names = ", ".join(allowed)
        return f"sandbox image {image!r} is not one the operator allows ({names}); {WHERE}"

    def _snapshot(self, client: docker.DockerClient, image: str, allowed: list[str]) -> str | None:
        try:
            found = client.images.get(image)
        except docker.errors.ImageNotFound:
            return f"sandbox snapshot {image!r} does not exist"
        labels = found.labels or {}
        repo, key = labels.get(REPO_LABEL, ""), labels.get(KEY_LABEL, "")
        made = labels.get(SNAPSHOT_LABEL) == "1" and repo and key
        if not made or image != f"{snapshot_repository(repo)}:{key[:40]}":
            return f"{image!r} is not a dependency snapshot onloop made (its labels disagree)"
        layers = list(found.attrs.get("RootFS", {}).get("Layers") or [])
        for name in allowed:
            try:
                base = list(client.images.get(name).attrs.get("RootFS", {}).get("Layers") or [])
            except docker.errors.ImageNotFound:
                continue
            if base and layers[: len(base)] == base:
                return None
        return f"sandbox snapshot {image!r} was not built on an image the operator allows"
