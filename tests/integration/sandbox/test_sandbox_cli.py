"""`onloop sandbox reap` and `build-image` against the real daemon, with onloop's settings."""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from app.cli.sandbox import sandbox
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.sandbox.docker_backend import POOL_LABEL, DockerBackend
from tasks.sandbox.reaper import reap
from tests.doubles.sandboxes import job_containers, new_job_id

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


def test_the_reap_judges_ages_by_its_clock(docker_client: Any, image: str, tmp_path: Path) -> None:
    """Containers under `min_age` are spared (a job that is starting); on a clock two minutes
    ahead the same containers are old enough, and only the finished job's goes."""
    running, finished = new_job_id(), new_job_id()
    backend = DockerBackend(docker_client)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keep = backend.start(running, image, tmp_path / "a")
    gone = backend.start(finished, image, tmp_path / "b")

    def is_running(job: int) -> bool:
        return job != finished  # other tests' containers are left alone

    try:
        assert gone.container.name not in reap(docker_client, is_running)
        assert job_containers(docker_client, finished)
        later = reap(docker_client, is_running, now=lambda: time.time() + 120)
        assert gone.container.name in later and keep.container.name not in later
        assert not job_containers(docker_client, finished)
        assert keep.exec("echo ok").stdout == "ok\n"
    finally:
        keep.stop()
        gone.stop()


def test_reap_asks_the_database_through_onloop_settings(
    docker_client: Any,
    image: str,
    db: Database,
    database_url: str,
    workdir: Path,
) -> None:
    """`onloop sandbox reap` reads the settings (.env), asks the database which jobs run and
    removes what finished jobs left: here their workspaces, whose age the test sets (its
    containers are too young to be judged, and stay)."""
    running, finished = add_job(db, JobState.RUNNING), add_job(db, JobState.SUCCEEDED)
    workspaces = workdir / "work" / "workspaces"
    kept, left = workspaces / f"job-{running}-a1b2c3d4", workspaces / f"job-{finished}-e5f6g7h8"
    for path in (kept, left):
        path.mkdir(parents=True)
        then = time.time() - 3600
        os.utime(path, (then, then))
    (workdir / "c").mkdir()
    fresh = DockerBackend(docker_client).start(finished, image, workdir / "c")
    (workdir / ".env").write_text(
        f"ONLOOP_DATABASE_URL={database_url}\nONLOOP_WORK_DIR={workdir / 'work'}\n"
        f"ONLOOP_SANDBOX_IMAGE={image}\nONLOOP_SANDBOX_POOL_SIZE=1\n"
    )
    pools_before = pool_containers(docker_client)
    try:
        result = CliRunner().invoke(sandbox, ["reap"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert f"workspaces/{left.name}" in result.output and not left.exists()
        assert kept.is_dir() and kept.name not in result.output
        assert fresh.container.name not in result.output
        assert fresh.exec("echo ok").stdout == "ok\n"
        # The command started no warm pool, whose containers it would leave behind on exit.
        assert pool_containers(docker_client) <= pools_before
    finally:
        fresh.stop()


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
