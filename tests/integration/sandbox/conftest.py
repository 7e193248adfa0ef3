"""Sandbox fixtures: the Docker daemon (a failure in CI, a skip elsewhere), backends, a git
server with token auth, the setup egress gateway, and cleanup that checks no container
outlives its test."""

from __future__ import annotations

import os
import random
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.sandbox.base import Limits, Sandbox, SandboxBackend
from tasks.sandbox.egress.gateway import EgressGateway
from tests.doubles.git_server import GitServer

IMAGE = os.environ.get("ONLOOP_SANDBOX_IMAGE", "onloop-sandbox:latest")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip, except in CI, where what the sandbox tests need must be there."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def docker_or_fail() -> Any:
    """A live Docker client whose daemon answers, or a skip (a failure in CI)."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        unavailable(f"no Docker daemon reachable ({exc.__class__.__name__}: {exc})")
    return client


@pytest.fixture(scope="session")
def docker_client() -> Any:
    return docker_or_fail()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    import docker.errors

    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"sandbox image {IMAGE} missing: run `bash .ci/sandbox-setup.sh`")
    return IMAGE


def job_containers(client: Any, job_id: int) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"onloop.job={job_id}"}))


def new_job_id() -> int:
    """A job id no test database holds (those count from 1; test_sandbox_cli's are below
    2·10^8) and no other test's sandbox shares, on a Docker daemon shared between runs."""
    return random.randrange(10**9, 2 * 10**9)


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "local"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(backend_name: str, request: pytest.FixtureRequest) -> SandboxBackend:
    if backend_name == "docker":
        from tasks.sandbox.docker_backend import DockerBackend

        return DockerBackend(request.getfixturevalue("docker_client"))
    if not shutil.which("bwrap"):
        unavailable("bubblewrap is not installed (apt-get install bubblewrap)")
    from tasks.sandbox.local_backend import LocalBackend

    return LocalBackend()


@pytest.fixture
def run_image(backend_name: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("image")) if backend_name == "docker" else ""


StartFn = Callable[..., Sandbox]


@pytest.fixture
def start(
    backend: SandboxBackend, run_image: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[StartFn]:
    """start(limits=..., files=...) -> a sandbox on a fresh workspace; all stopped after,
    and (Docker) the test fails if any of their containers is still there."""
    started: list[Sandbox] = []

    def _start(limits: Limits | None = None, files: dict[str, str] | None = None) -> Sandbox:
        workspace = tmp_path / f"ws-{len(started)}"
        workspace.mkdir()
        for name, text in (files or {}).items():
            (workspace / name).write_text(text)
        sandbox = backend.start(
            new_job_id(), run_image, workspace, limits or Limits(command_timeout=60)
        )
        started.append(sandbox)
        return sandbox

    yield _start
    for sandbox in started:
        sandbox.stop()
    if backend.name == "docker":
        client = request.getfixturevalue("docker_client")
        left = [c.name for s in started for c in job_containers(client, s.job_id)]
        assert not left, f"containers left behind: {left}"


@pytest.fixture
def token() -> str:
    return "ghs_" + uuid.uuid4().hex + uuid.uuid4().hex[:4]


@pytest.fixture
def git_server(tmp_path: Path, token: str) -> Iterator[GitServer]:
    root = tmp_path / "served"
    root.mkdir()
    with GitServer(root, token) as server:
        yield server


@pytest.fixture(scope="session")
def proxy_image(docker_client: Any, image: str) -> str:
    try:
        docker_client.containers.run(image, ["test", "-x", "/opt/tools/bin/proxy"], remove=True)
    except Exception:
        unavailable(f"{image} has no proxy.py: run `onloop sandbox build-image`")
    return image


@pytest.fixture
def gateway(docker_client: Any, proxy_image: str, tmp_path: Path) -> EgressGateway:
    return EgressGateway(
        docker_client, tmp_path / "egress", proxy_image=proxy_image, cache_dir=tmp_path / "dl"
    )


@pytest.fixture
def host_ip(docker_client: Any, gateway: EgressGateway) -> str:
    """This machine's own address on the proxies' network: where the test index listens."""
    network = docker_client.networks.get(gateway.egress_network())
    return str(network.attrs["IPAM"]["Config"][0]["Gateway"])
