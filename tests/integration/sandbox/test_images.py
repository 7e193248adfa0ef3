"""Only the operator chooses what a sandbox runs on: a repository's `sandbox.image` never
becomes the local sandbox's root, nothing in the root runs with capabilities, and the
Docker backend itself starts only allowed images and onloop's own snapshots of them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from app.core.settings import Settings
from tasks.sandbox.allowed import ImageGate
from tasks.sandbox.base import Limits, SandboxError
from tasks.sandbox.docker_backend import DockerBackend
from tasks.sandbox.local_backend import LocalBackend
from tasks.sandbox.snapshots import KEY_LABEL, REPO_LABEL, SNAPSHOT_LABEL, snapshot_repository
from tasks.sandbox.workplace import make_workplace
from tests.doubles.rootfs import SECRET, tiny_rootfs
from tests.doubles.sandboxes import job_containers, new_job_id, unavailable

ZERO = "0" * 16
CAPS = 'while read -r line; do case "$line" in Cap*) echo "$line";; esac; done < /proc/self/status'


def cat(path: str) -> str:
    """`cat` with the shell's builtins only (the tiny rootfs has nothing but sh)."""
    return f'while read -r line; do echo "$line"; done < {path}'


def caps_of(output: str) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in output.splitlines() if line.startswith("Cap"))
    return {name.strip(): value.strip() for name, value in pairs}


@pytest.fixture
def bwrap() -> None:
    if not shutil.which("bwrap"):
        unavailable("bubblewrap is not installed (apt-get install bubblewrap)")


def test_a_host_directory_named_as_image_never_becomes_the_root(
    bwrap: None, tmp_path: Path
) -> None:
    """A repository names a host directory holding a root-only secret and a planted
    `setpriv`; today that directory is the root and (under root) its setpriv runs with
    CAP_DAC_READ_SEARCH and friends. The root is the backend's own, whatever `image` says."""
    planted = tiny_rootfs(tmp_path / "planted")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with LocalBackend().start(
        new_job_id(), str(planted), workspace, Limits(command_timeout=30)
    ) as box:
        done = box.exec(["/bin/sh", "-c", f"{cat('/secret')}; {cat('/onloop-rootfs')}; echo end"])
    assert done.stdout.strip().endswith("end"), done
    assert SECRET not in done.output and "operator's rootfs" not in done.output
    assert not (workspace / "leaked").exists() and not (workspace / "setpriv-ran").exists()


def test_the_operators_rootfs_is_the_root_and_the_command_has_no_capability(
    bwrap: None, tmp_path: Path
) -> None:
    """ONLOOP_SANDBOX_ROOTFS is the root. Under a root worker (as in CI) the setpriv that drops
    privileges is the host's, run outside that root: the one planted in it never runs, and the
    command ends with no capability in any set."""
    rootfs = tiny_rootfs(tmp_path / "rootfs")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, sandbox_backend="local", sandbox_rootfs=rootfs, work_dir=tmp_path / "w"
    )
    backend = make_workplace(settings).backend
    assert isinstance(backend, LocalBackend) and backend.rootfs == rootfs.resolve()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with backend.start(new_job_id(), "", workspace, Limits(command_timeout=30)) as box:
        done = box.exec(["/bin/sh", "-c", f"{cat('/onloop-rootfs')}; {CAPS}; {cat('/secret')}"])
    assert "the operator's rootfs" in done.stdout, done
    caps = caps_of(done.stdout)
    assert {caps[n] for n in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {ZERO}, caps
    assert not (workspace / "setpriv-ran").exists(), (workspace / "setpriv-ran").read_text()
    assert not (workspace / "leaked").exists() and SECRET not in done.output


def test_under_root_the_helpers_are_the_hosts(bwrap: None) -> None:
    if os.geteuid() != 0:
        pytest.skip("the worker is not root: bubblewrap alone drops to the worker's uid")
    backend = LocalBackend()
    assert backend.setpriv is not None and Path(backend.setpriv).is_absolute()
    assert Path(backend.bwrap).is_absolute()


# --- Docker -------------------------------------------------------------------------------


@pytest.fixture
def snapshot_tags(docker_client: Any) -> Iterator[list[str]]:
    """Tags a test makes on the shared daemon; removed after."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        try:
            docker_client.images.remove(tag, force=True)
        except docker.errors.APIError:
            pass


def make_snapshot(client: Any, base: str, repo: str, key: str, tags: list[str]) -> str:
    """A snapshot as tasks/sandbox/snapshots.py makes one: a committed container of `base`."""
    ref = f"{snapshot_repository(repo)}:{key[:40]}"
    repository, tag = ref.rsplit(":", 1)
    container = client.containers.create(base, ["sh", "-c", "echo dependency > /opt/dep"], user="0")
    try:
        container.start()
        container.wait(timeout=60)
        labels = {SNAPSHOT_LABEL: "1", REPO_LABEL: repo, KEY_LABEL: key}
        container.commit(repository=repository, tag=tag, conf={"Labels": labels})
    finally:
        container.remove(force=True)
    tags.append(ref)
    return ref


@pytest.mark.docker
def test_the_docker_backend_starts_only_what_the_operator_allows(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    """The image exists on the daemon, but the operator does not allow it: nothing starts."""
    allowed = ["onloop-sandbox:some-other-tag"]
    backend = DockerBackend(docker_client, images=ImageGate(lambda: allowed))
    job = new_job_id()
    with pytest.raises(SandboxError) as err:
        backend.start(job, image, tmp_path)
    assert "not one the operator allows (onloop-sandbox:some-other-tag)" in str(err.value)
    assert "sandbox.images" in str(err.value)
    assert not job_containers(docker_client, job)
    allowed.append(image)  # the organisation file changed: read at every start
    with backend.start(job, image, tmp_path) as box:
        assert box.exec(["true"]).ok


@pytest.mark.docker
def test_only_onloops_own_snapshots_of_allowed_images_start(
    docker_client: Any, image: str, tmp_path: Path, snapshot_tags: list[str]
) -> None:
    key = "ab" * 32
    real = make_snapshot(docker_client, image, "octo/widgets", key, snapshot_tags)
    backend = DockerBackend(docker_client, images=ImageGate(lambda: [image]))
    with backend.start(new_job_id(), real, tmp_path) as box:
        assert box.exec(["cat", "/opt/dep"]).stdout == "dependency\n"

    # Another repository's tag pointing at this snapshot: its labels disagree with its name.
    forged = f"{snapshot_repository('evil/repo')}:{key[:40]}"
    docker_client.images.get(real).tag(*forged.rsplit(":", 1))
    snapshot_tags.append(forged)
    # An image merely tagged like a snapshot (no labels at all).
    bare = f"{snapshot_repository('octo/widgets')}:{'cd' * 20}"
    docker_client.images.get(image).tag(*bare.rsplit(":", 1))
    snapshot_tags.append(bare)
    for ref, why in ((forged, "labels disagree"), (bare, "labels disagree")):
        job = new_job_id()
        with pytest.raises(SandboxError, match=why):
            backend.start(job, ref, tmp_path)
        assert not job_containers(docker_client, job)

    # A real snapshot, but of an image the operator no longer allows.
    elsewhere = DockerBackend(docker_client, images=ImageGate(lambda: ["onloop-sandbox:gone"]))
    with pytest.raises(SandboxError, match="not built on an image the operator allows"):
        elsewhere.start(new_job_id(), real, tmp_path)


@pytest.mark.docker
def test_the_workplace_gives_the_docker_backend_the_organisations_list(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    org = tmp_path / "org.yml"
    org.write_text("sandbox:\n  images: [python:3.12-slim]\n")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        sandbox_image="onloop-sandbox:only-this",
        sandbox_pool_size=0,
        config_file=org,
        work_dir=tmp_path / "w",
    )
    backend = make_workplace(settings).backend
    assert isinstance(backend, DockerBackend)
    with pytest.raises(SandboxError) as err:
        backend.start(new_job_id(), image, tmp_path)
    assert "(onloop-sandbox:only-this, python:3.12-slim)" in str(err.value)
