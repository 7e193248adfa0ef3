"""A job with a `sandbox.setup` under an ONLOOP_SANDBOX_IMAGE not built by `onloop sandbox
build-image`: refused before setup, the status comment naming the image and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.plain_image import plain_image
from tests.doubles.sandboxes import IMAGE, docker_or_fail, unavailable
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def plain() -> Iterator[str]:
    client = docker_or_fail()
    try:
        client.images.get(IMAGE)
    except Exception:
        unavailable(f"{IMAGE} missing: run `onloop sandbox build-image`")
    with plain_image(client, IMAGE) as tag:
        yield tag


def pull_request(world: World) -> int:
    world.double.commit(
        REPO,
        "main",
        {".github/onloop.yml": "sandbox:\n  setup: \"python3 -c 'print(1)'\"\n"},
    )
    world.double.create_branch(REPO, "more")
    world.double.commit(REPO, "more", {"more.py": '"""More."""\n'}, message="More")
    return world.double.create_pull(REPO, "more", title="More", user="alice").number


def test_a_job_with_setup_is_refused_naming_the_image_and_the_fix(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, plain: str
) -> None:
    for world in make_world(github_double, database_url, tmp_path, sandbox_image=plain):
        number = pull_request(world)
        world.authorize("alice")
        job = world.wait(world.comment("/agent review", "alice", number))
        assert job.state == JobState.FAILED, (job.result, world.worker.output())
        assert job.result["rule"] == "sandbox_image", job.result
        status = world.final_status(job.id, number)
        assert plain in status.body and "onloop sandbox build-image" in status.body, status.body
        assert "internal error" not in status.body and "Fix `sandbox.setup`" not in status.body
        assert "tell the people who run onloop" in status.body
