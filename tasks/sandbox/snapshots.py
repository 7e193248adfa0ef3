"""Warm snapshots: a repository's image after its `setup`, keyed by its dependency files."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import docker
import docker.errors

from tasks.sandbox.docker_backend import DockerSandbox
from tasks.sandbox.trust import HeadTrust

log = logging.getLogger(__name__)

# Files whose content decides what `setup` installs; matched at the repository's root.
DEPENDENCY_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "requirements/*.txt",
    "requirements*.in",
    "constraints*.txt",
    "Pipfile",
    "Pipfile.lock",
    "poetry.lock",
    "pdm.lock",
    "uv.lock",
    "tox.ini",
    "environment.yml",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "Cargo.toml",
    "Cargo.lock",
    "go.mod",
    "go.sum",
    "Gemfile",
    "Gemfile.lock",
    "composer.json",
    "composer.lock",
)
SNAPSHOT_LABEL = "onloop.snapshot"
REPO_LABEL = "onloop.snapshot.repo"
KEY_LABEL = "onloop.snapshot.key"
BASE_SIZE_LABEL = "onloop.snapshot.base-size"


def snapshot_key(
    base_image_id: str,
    setup: str,
    blobs: Sequence[tuple[str, str]],
    *,
    scope: str = "",
    trust: HeadTrust = HeadTrust.TRUSTED,
) -> str:
    """The key: the base image, the setup command, every dependency file's content, whose
    snapshot it is (`scope`: the installation) and the trust of the head that made it, so
    one installation's or an untrusted head's snapshot is never another job's start."""
    doc = {"base": base_image_id, "setup": setup, "files": sorted(blobs)}
    doc |= {"scope": scope, "trust": str(trust)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def snapshot_repository(repo: str) -> str:
    """A valid Docker repository name for `owner/name`'s snapshots."""
    safe = re.sub(r"[^a-z0-9]+", "-", repo.lower()).strip("-")[:60] or "repo"
    return f"onloop-snapshot/{safe}-{hashlib.sha256(repo.encode()).hexdigest()[:8]}"


class SnapshotStore:
    """Snapshot images in the local Docker, least recently used evicted above `max_bytes`.

    Last use is the mtime of a marker file per key under `state_dir` (images cannot be
    relabelled); the size counted is each snapshot's own layer, not its base.
    """

    def __init__(
        self, client: docker.DockerClient, state_dir: Path, *, max_bytes: int = 20 * 2**30
    ) -> None:
        self.client = client
        self.state_dir = state_dir
        self.max_bytes = max_bytes
        state_dir.mkdir(parents=True, exist_ok=True)

    def key(
        self,
        base_image: str,
        setup: str,
        blobs: Sequence[tuple[str, str]],
        *,
        scope: str = "",
        trust: HeadTrust = HeadTrust.TRUSTED,
    ) -> str:
        """The snapshot key for a job (the base image is taken by id, not by tag)."""
        image_id = str(self.client.images.get(base_image).id)
        return snapshot_key(image_id, setup, blobs, scope=scope, trust=trust)

    def tag(self, repo: str, key: str) -> str:
        """The image reference of one snapshot."""
        return f"{snapshot_repository(repo)}:{key[:40]}"

    def _touch(self, key: str) -> None:
        marker = self.state_dir / f"{key}.used"
        marker.touch()
        os.utime(marker)

    def find(self, repo: str, key: str) -> str | None:
        """The snapshot's reference if it exists (and it now counts as used), else None."""
        ref = self.tag(repo, key)
        try:
            self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        self._touch(key)
        return ref

    def create(self, sandbox: DockerSandbox, repo: str, key: str, base_image: str) -> str:
        """Commit the sandbox (after its setup) as the snapshot for `key`; its reference."""
        base_size = int(self.client.images.get(base_image).attrs.get("Size", 0))
        labels = {
            SNAPSHOT_LABEL: "1",
            REPO_LABEL: repo,
            KEY_LABEL: key,
            BASE_SIZE_LABEL: str(base_size),
        }
        ref = self.tag(repo, key)
        repository, tag = ref.rsplit(":", 1)
        sandbox.commit(repository, tag, labels)
        self._touch(key)
        self.evict()
        return ref

    def usage(self) -> list[tuple[float, int, str, str]]:
        """(last use, own size, image id, key) of every snapshot, oldest use first."""
        rows = []
        for image in self.client.images.list(filters={"label": SNAPSHOT_LABEL}):
            labels = image.labels or {}
            key = labels.get(KEY_LABEL, "")
            size = int(image.attrs.get("Size", 0)) - int(labels.get(BASE_SIZE_LABEL, "0"))
            marker = self.state_dir / f"{key}.used"
            used = marker.stat().st_mtime if marker.exists() else 0.0
            rows.append((used, max(size, 0), str(image.id), key))
        return sorted(rows)

    def evict(self) -> list[str]:
        """Remove least recently used snapshots until the rest fit in `max_bytes`."""
        rows = self.usage()
        total = sum(r[1] for r in rows)
        removed: list[str] = []
        for _, size, image_id, key in rows:
            if total <= self.max_bytes:
                break
            try:
                self.client.images.remove(image_id, force=False, noprune=False)
            except docker.errors.APIError as exc:  # e.g. a running job uses it
                log.info("snapshot %s not evicted: %s", image_id, exc)
                continue
            total -= size
            removed.append(image_id)
            (self.state_dir / f"{key}.used").unlink(missing_ok=True)
            log.info("evicted sandbox snapshot %s (%d bytes)", image_id, size)
        return removed

    def prune_markers(self, older_than: float = 30 * 86400) -> None:
        """Forget markers of snapshots that are gone (housekeeping)."""
        keys = {r[3] for r in self.usage()}
        for marker in self.state_dir.glob("*.used"):
            if marker.stem not in keys and marker.stat().st_mtime < time.time() - older_than:
                marker.unlink(missing_ok=True)
