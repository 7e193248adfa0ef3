"""The Docker backend's container settings, the reaper, the warm pool and the image."""

from __future__ import annotations

import logging
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tasks.sandbox.base import Limits, SandboxError
from tasks.sandbox.docker_backend import (
    JOB_LABEL,
    POOL_LABEL,
    START_PAUSES,
    DockerBackend,
    create_kwargs,
)
from tasks.sandbox.pool import WarmPool
from tasks.sandbox.reaper import process_token, reap
from tests.doubles.sandboxes import job_containers, new_job_id

pytestmark = pytest.mark.docker


def test_container_is_locked_down(docker_client: Any, image: str, tmp_path: Path) -> None:
    limits = Limits(memory_mb=300, cpus=0.5, pids=77)
    job = new_job_id()
    with DockerBackend(docker_client).start(job, image, tmp_path, limits) as sb:
        host = docker_client.api.inspect_container(sb.container_id)["HostConfig"]
        config = docker_client.api.inspect_container(sb.container_id)["Config"]
        assert config["Labels"][JOB_LABEL] == str(job)
        assert host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"]
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert host["PidsLimit"] == 77
        assert host["Memory"] == host["MemorySwap"] == 300 * 2**20
        assert host["NanoCpus"] == 5 * 10**8
        assert [m["Source"] for m in host["Mounts"]] == [str(tmp_path.resolve())]
        assert "/tmp" in host["Tmpfs"]
        assert not host["Binds"]
        assert sb.exec("id -u").stdout.strip() == "1000"
        assert config["User"] != "0" and not config["User"].startswith("0:")
    assert not job_containers(docker_client, job)


def test_runtime_comes_from_settings_and_a_bad_one_leaves_nothing(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    kwargs = create_kwargs(image, tmp_path, Limits(), {}, "n", runtime="runsc")
    assert kwargs["runtime"] == "runsc"
    backend = DockerBackend(docker_client, runtime="no-such-runtime")
    job = new_job_id()
    with pytest.raises(SandboxError):
        backend.start(job, image, tmp_path)
    assert not job_containers(docker_client, job)
    with pytest.raises(SandboxError, match="build-image"):
        DockerBackend(docker_client).start(new_job_id(), "onloop-no-such:image", tmp_path)


def test_reaper_removes_containers_of_jobs_that_do_not_run(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    backend = DockerBackend(docker_client)
    running, dead = new_job_id(), new_job_id()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keep = backend.start(running, image, tmp_path / "a")
    gone = backend.start(dead, image, tmp_path / "b")
    orphan = DockerBackend(docker_client).run(
        create_kwargs(
            image,
            tmp_path / "a",
            Limits(),
            {JOB_LABEL: "", POOL_LABEL: f"{socket.gethostname()}:999999999:1"},
            f"onloop-pool-{uuid.uuid4().hex[:6]}",
        )
    )
    asked: list[int] = []

    def is_running(job: int) -> bool:
        asked.append(job)
        return job != dead  # containers of other tests' jobs are left alone

    try:
        # Jobs' containers this young are not judged; a dead worker's idle one goes at once.
        reaped = reap(docker_client, is_running, min_age=3600)
        # Idle pool containers of other dead workers on this daemon (a test process killed
        # earlier) go too; no job's container does.
        assert orphan.name in reaped and all(n.startswith("onloop-pool-") for n in reaped)
        assert reap(docker_client, is_running, min_age=0) == [gone.container.name]
        assert job_containers(docker_client, running)
        assert not job_containers(docker_client, dead)
        assert running in asked
        assert keep.exec("echo ok").stdout == "ok\n"
    finally:
        keep.stop()
        gone.stop()


def test_warm_pool_hands_out_a_ready_container(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    backend = DockerBackend(docker_client)
    limits = Limits()
    pool = WarmPool(backend, image, tmp_path / "pool", limits, size=1)
    try:
        assert pool.fill() == 1
        assert pool.claim("other:image", limits) is None
        assert pool.claim(image, Limits(memory_mb=1)) is None
        slot = pool.claim(image, limits)
        assert slot is not None
        (slot.workspace / "hello.txt").write_text("from the worker")
        job = new_job_id()
        sb = slot.activate(job, Limits(job_timeout=600))
        assert sb.exec("cat hello.txt").stdout == "from the worker"
        assert sb.container.reload() is None
        assert sb.container.name.startswith(f"onloop-job-{job}--")
        # The idle container of a live worker survives the reaper; the job's goes with its job.
        pool.fill()
        removed = reap(docker_client, lambda running: running != job, min_age=0)
        assert removed == [sb.container.name]
        assert len(pool._idle) == 1
        idle = pool._idle[0].container
        assert docker_client.containers.get(idle.id).labels[POOL_LABEL] == process_token()
    finally:
        pool.close()
    leftover = docker_client.containers.list(
        all=True, filters={"label": f"{POOL_LABEL}={process_token()}"}
    )
    assert leftover == []


def test_image_has_the_tools_and_a_user(docker_client: Any, image: str, tmp_path: Path) -> None:
    from tasks.sandbox.image import HASH_LABEL, content_hash

    labels = docker_client.images.get(image).labels
    assert labels[HASH_LABEL] == content_hash()
    with DockerBackend(docker_client).start(new_job_id(), image, tmp_path) as sb:
        res = sb.exec(
            "python3 --version && git --version && ruff --version && pytest --version "
            "&& gcc --version && make --version && id -un && pwd"
        )
        assert res.ok, res
        assert "ruff" in res.stdout and "sandbox\n/workspace" in res.stdout


def test_build_image_skips_an_image_with_the_same_content(image: str) -> None:
    from app.cli.sandbox import sandbox

    result = CliRunner().invoke(sandbox, ["build-image", "--tag", image])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output


class MakeDirOnRetry(logging.Handler):
    """Makes the workspace's missing directory when the sandbox says it tries again."""

    def __init__(self, missing: Path) -> None:
        super().__init__(logging.WARNING)
        self.missing = missing
        self.retries: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "trying again" in record.getMessage():
            self.retries.append(record.getMessage())
            self.missing.mkdir(exist_ok=True)
            self.missing.chmod(0o777)


def test_a_command_docker_could_not_start_is_tried_again(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    # Under load dockerd fails an exec's start now and then (CI saw an overlay mount's
    # "Invalid argument"): a process that never started is started again, not reported as the
    # command's failure. A missing working directory fails the start the same way, for real.
    missing = tmp_path / "later"
    handler = MakeDirOnRetry(missing)
    logging.getLogger("tasks.sandbox.docker_backend").addHandler(handler)
    try:
        with DockerBackend(docker_client).start(new_job_id(), image, tmp_path, Limits()) as sb:
            done = sb.exec(["sh", "-c", "pwd"], workdir="/workspace/later")
            assert len(handler.retries) == 1, handler.retries
            assert (done.exit_code, done.stdout.strip()) == (0, "/workspace/later")
            missing.rmdir()
            never = sb.exec(["sh", "-c", "pwd"], workdir="/workspace/nowhere")
    finally:
        logging.getLogger("tasks.sandbox.docker_backend").removeHandler(handler)
    # It stays missing: after the last try the failure is docker's, said as such.
    assert len(handler.retries) == 1 + len(START_PAUSES), handler.retries
    assert never.exit_code == 126 and not never.stdout
    assert never.stderr.startswith("could not start the command: OCI runtime exec failed")
    assert "/workspace/nowhere" in never.stderr
