"""`onloop sandbox reap` and `build-image` against the real daemon, with onloop's settings."""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli.sandbox import sandbox
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.sandbox import reaper
from tasks.sandbox.docker_backend import POOL_LABEL, DockerBackend
from tests.doubles.sandboxes import job_containers

pytestmark = pytest.mark.docker


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory of the command: no ONLOOP_* from outside, its own .env."""
    for name in [n for n in os.environ if n.startswith("ONLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pool_containers(client: Any) -> set[str]:
    return {c.name for c in client.containers.list(all=True, filters={"label": POOL_LABEL})}


def add_job(db: Database, state: str) -> int:
    # Ids far from other tests' so the sweep's verdicts concern this test's containers.
    job_id = random.randrange(10**8, 2 * 10**8)
    with db.transaction() as s:
        s.add(Job(id=job_id, kind="review", repo="o/r", requested_by="someone", state=state))
    return job_id


def test_reap_removes_finished_jobs_sandboxes_and_keeps_running_ones(
    docker_client: Any,
    image: str,
    db: Database,
    database_url: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running, finished = add_job(db, JobState.RUNNING), add_job(db, JobState.SUCCEEDED)
    backend = DockerBackend(docker_client)
    (workdir / "a").mkdir()
    (workdir / "b").mkdir()
    keep = backend.start(running, image, workdir / "a")
    gone = backend.start(finished, image, workdir / "b")
    (workdir / ".env").write_text(
        f"ONLOOP_DATABASE_URL={database_url}\nONLOOP_WORK_DIR={workdir / 'work'}\n"
        f"ONLOOP_SANDBOX_IMAGE={image}\nONLOOP_SANDBOX_POOL_SIZE=1\n"
    )
    # The sweep spares containers under a minute old (a job that is starting): let these be
    # two minutes old to it, rather than wait.
    clock = time.time
    monkeypatch.setattr(reaper, "time", SimpleNamespace(time=lambda: clock() + 120))
    pools_before = pool_containers(docker_client)
    try:
        result = CliRunner().invoke(sandbox, ["reap"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert gone.container.name in result.output
        assert not job_containers(docker_client, finished)
        assert job_containers(docker_client, running)
        assert keep.exec("echo ok").stdout == "ok\n"
        assert keep.container.name not in result.output
        # The command started no warm pool, whose containers it would leave behind on exit.
        assert pool_containers(docker_client) <= pools_before
    finally:
        keep.stop()
        gone.stop()


def test_reap_has_no_all_option(workdir: Path) -> None:
    """`--all` removed running jobs' sandboxes too; there is no safe meaning for it."""
    result = CliRunner().invoke(sandbox, ["reap", "--all"])
    assert result.exit_code == 2 and "No such option" in result.output


def test_build_image_tag_comes_from_env_file(docker_client: Any, image: str, workdir: Path) -> None:
    from tasks.sandbox.image import content_hash, context_dir, image_hash

    if image_hash(docker_client, image) != content_hash(context_dir()):
        pytest.skip(f"{image} is not up to date: run `onloop sandbox build-image` first")
    tag = f"onloop-sandbox-cli-test:{uuid.uuid4().hex[:8]}"
    docker_client.images.get(image).tag(*tag.split(":"))
    try:
        (workdir / ".env").write_text(f"ONLOOP_SANDBOX_IMAGE={tag}\n")
        result = CliRunner().invoke(sandbox, ["build-image"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"{tag} is up to date"), result.output
    finally:
        docker_client.images.remove(tag, noprune=True)
