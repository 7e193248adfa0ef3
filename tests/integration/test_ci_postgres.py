"""`.ci/postgres.sh`, the CI step that makes sure PostgreSQL answers: against a throwaway
cluster of the machine's own PostgreSQL, stopped or not yet created."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "postgres.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("pg_createcluster") is None,
    reason="needs root and Debian's postgresql-common (pg_createcluster), as CI has",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _version() -> str:
    return sorted(os.listdir("/etc/postgresql"), key=lambda v: [int(p) for p in v.split(".")])[-1]


@pytest.fixture
def cluster() -> Iterator[tuple[str, str, int]]:
    """A cluster name and port no one uses; dropped afterwards, whatever the script did."""
    name, port = f"onloopci{uuid.uuid4().hex[:8]}", _free_port()
    yield _version(), name, port
    subprocess.run(["pg_dropcluster", "--stop", _version(), name], capture_output=True)


def _run_script(version: str, name: str, port: int) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "ONLOOP_CI_PG_VERSION": version,
        "ONLOOP_CI_PG_CLUSTER": name,
        "ONLOOP_CI_PG_PORT": str(port),
    }
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)


def _answers(port: int) -> int:
    with psycopg.connect(
        f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout=5
    ) as c:
        row = c.execute("SELECT 1").fetchone()
    assert row is not None
    return int(row[0])


def test_a_stopped_cluster_is_started(cluster: tuple[str, str, int]) -> None:
    version, name, port = cluster
    subprocess.run(
        ["pg_createcluster", version, name, "-p", str(port)], check=True, capture_output=True
    )
    with pytest.raises(psycopg.OperationalError):
        _answers(port)

    done = _run_script(version, name, port)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"starting cluster {version}/{name}" in done.stdout


def test_a_missing_cluster_is_created_and_trusts_local_connections(
    cluster: tuple[str, str, int],
) -> None:
    version, name, port = cluster
    assert not Path(f"/etc/postgresql/{version}/{name}").exists()

    done = _run_script(version, name, port)

    assert done.returncode == 0, done.stdout + done.stderr
    assert f"creating cluster {version}/{name}" in done.stdout
    assert _answers(port) == 1  # as `postgres`, with no password: what the tests connect as


def test_a_running_cluster_is_left_alone(cluster: tuple[str, str, int]) -> None:
    version, name, port = cluster
    assert _run_script(version, name, port).returncode == 0
    hba = Path(f"/etc/postgresql/{version}/{name}/pg_hba.conf").read_text()

    again = _run_script(version, name, port)

    assert again.returncode == 0 and again.stdout == ""
    assert Path(f"/etc/postgresql/{version}/{name}/pg_hba.conf").read_text() == hba
