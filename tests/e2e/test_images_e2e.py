"""A repository's `sandbox.image` end to end: webhook → worker → a failed job that says which
images the operator allows, and no container of the image the repository asked for."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def unlisted(docker_client: Any, image: str) -> Iterator[str]:
    """An image that exists on the daemon (the default one, under another name) but that
    the operator never listed."""
    tag = f"onloop-unlisted-{uuid.uuid4().hex[:8]}:e2e"
    docker_client.images.get(image).tag(*tag.rsplit(":", 1))
    yield tag
    docker_client.images.remove(tag)  # only the name: the image keeps its other tags


@pytest.fixture(params=["unlisted", "host path"])
def asked(request: pytest.FixtureRequest) -> str:
    return "/" if request.param == "host path" else str(request.getfixturevalue("unlisted"))


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, asked: str
) -> Iterator[World]:
    files: dict[str, str | bytes] = {
        "README.md": "widgets\n",
        ".github/onloop.yml": f"sandbox:\n  image: '{asked}'\n",
    }
    yield from make_world(github_double, database_url, tmp_path, files, sandbox_pool_size=0)


def containers_of(image: str) -> list[str]:
    client = docker.APIClient()
    try:
        return [c["Id"] for c in client.containers(all=True) if c.get("Image") == image]
    finally:
        client.close()


def test_a_repository_runs_only_images_the_operator_allows(world: World, asked: str) -> None:
    double = world.double
    double.create_branch(REPO, "spin")
    double.commit(REPO, "spin", {"widgets.py": "x = 1\n"}, message="Spin widgets")
    number = double.create_pull(REPO, "spin", title="Spin", user="alice").number
    world.authorize("alice")
    job = world.wait(world.comment("/agent review", "alice", number))
    assert job.state == JobState.FAILED, (job.result, world.worker.output())
    error = job.result["error"]
    if asked == "/":  # never even a valid config: it names a path
        assert "looks like a path" in error and "sandbox.image" in error, error
    else:
        assert f"`sandbox.image: {asked}`" in error, error
        assert f"`{world.settings.sandbox_image}`" in error and "`sandbox.images`" in error
        assert not containers_of(asked)
    assert "internal error" not in error
    assert not double.reviews
