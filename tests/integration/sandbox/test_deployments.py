"""Two onloop deployments on one Docker daemon: each reaper touches only its own sandboxes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.store import migrate
from app.store.db import Database
from app.store.deployment import deployment_id
from tasks.sandbox.docker_backend import DEPLOYMENT_LABEL, DockerBackend
from tasks.sandbox.workplace import reap_sandboxes
from tests.doubles.sandboxes import job_containers, new_job_id

pytestmark = pytest.mark.docker


def a_deployment(tmp_path: Path, name: str) -> tuple[Settings, Database]:
    url = f"sqlite:///{tmp_path / name}.db"
    migrate.upgrade(url)
    settings = Settings(_env_file=None, database_url=url, work_dir=tmp_path / name)  # type: ignore[call-arg]
    return settings, Database(url)


def test_the_deployment_id_is_made_once_and_kept(tmp_path: Path) -> None:
    _, db = a_deployment(tmp_path, "one")
    try:
        first = deployment_id(db)
        assert len(first) == 16 and deployment_id(db) == first
    finally:
        db.dispose()
    _, other = a_deployment(tmp_path, "two")
    try:
        assert deployment_id(other) != first
    finally:
        other.dispose()


def test_reaping_one_deployment_leaves_the_others_sandbox_running(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    """Neither database knows the other's job ids (here: the same id in both, finished in
    neither), so without the label the first reaper would remove the second's sandbox."""
    mine, my_db = a_deployment(tmp_path, "mine")
    theirs_settings, their_db = a_deployment(tmp_path, "theirs")
    job = new_job_id()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    my_backend = DockerBackend(docker_client, deployment=deployment_id(my_db))
    their_backend = DockerBackend(docker_client, deployment=deployment_id(their_db))
    gone = my_backend.start(job, image, tmp_path / "a")
    kept = their_backend.start(job, image, tmp_path / "b")
    try:
        assert gone.container.labels[DEPLOYMENT_LABEL] == deployment_id(my_db)
        later = time.time() + 120  # old enough to be judged
        removed = reap_sandboxes(mine, my_db, my_backend, now=lambda: later)
        assert gone.container.name in removed and kept.container.name not in removed
        assert [c.name for c in job_containers(docker_client, job)] == [kept.container.name]
        assert kept.exec("echo ok").stdout == "ok\n"
        assert reap_sandboxes(theirs_settings, their_db, their_backend, now=lambda: later) == [
            kept.container.name
        ]
    finally:
        gone.stop()
        kept.stop()
        my_db.dispose()
        their_db.dispose()
