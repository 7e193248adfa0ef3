"""Jobs on heads onloop does not trust (a fork's, an outsider's), end to end: their setup gets
no network and none of the operator's credentials, leaves no dependency snapshot, and what
it printed stays on the job's record, never in a public comment or check run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.package_index import PackageIndex
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PASSWORD = "e2e-untrusted-pw-2718"
LEAK = "LEAK-7f3a-what-setup-printed"
FORK = "dave/widgets"


@pytest.fixture
def index(host_ip: str) -> Iterator[PackageIndex]:
    with PackageIndex(host_ip, auth=f"reader:{PASSWORD}") as served:
        served.add("onloop-demo", module="VALUE = 42\n")
        yield served


def operator_files(tmp_path: Path, index: PackageIndex, untrusted: str) -> dict[str, Path]:
    """Credentials for the index, which the organisation file lists and names as private."""
    creds, org = tmp_path / "creds.yml", tmp_path / "org.yml"
    creds.write_text(f"{index.url}: {{username: reader, password: {PASSWORD}}}\n")
    org.write_text(
        f"sandbox:\n  egress: [pypi, '{index.url}/simple/']\n"
        f"  private_indexes: ['{index.url}']\n  untrusted_egress: {untrusted}\n"
    )
    return {"egress_credentials_file": creds, "config_file": org}


def configure(world: World, setup: str) -> None:
    config = f"sandbox:\n  setup: {json.dumps(setup)}\n"  # JSON is YAML
    world.double.commit(REPO, "main", {".github/onloop.yml": config, "lib.py": "A = 1\n"})


def pull(world: World, user: str, branch: str) -> int:
    """`user`'s pull request from `branch` of octo/widgets itself."""
    world.double.create_branch(REPO, branch)
    world.double.commit(REPO, branch, {f"{branch}.py": "B = 2\n"}, message=f"Add {branch}")
    return world.double.create_pull(REPO, branch, title=branch, user=user).number


def fork_pull(world: World) -> int:
    world.double.create_repo(FORK, fork_of=REPO)
    world.double.create_branch(FORK, "patch")
    world.double.commit(FORK, "patch", {"patch.py": "P = 1\n"}, message="Add patch")
    return world.double.create_pull(REPO, "dave:patch", user="dave").number


def snapshots(world: World) -> list[str]:
    """The keys of the snapshots this world's worker made (other tests share the daemon)."""
    return [marker.stem for marker in (world.root / "work" / "snapshots").glob("*.used")]


def test_a_fork_s_setup_has_no_network_and_its_output_stays_off_public_comments(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, index: PackageIndex
) -> None:
    fetch = f"import urllib.request as u; u.urlopen('{index.url}/simple/onloop-demo/', timeout=10)"
    setup = f'python3 -c "{fetch}"; echo {LEAK}; exit 3'
    files = operator_files(tmp_path, index, "none")
    for world in make_world(github_double, database_url, tmp_path, **files):
        configure(world, setup)
        world.authorize("alice")
        number = fork_pull(world)
        job = world.wait(world.comment("/agent review", "alice", number))
        assert job.state == JobState.FAILED, (job.result, world.worker.output())
        assert index.requests == [], job.result
        assert "setup_log" in job.result, job.result
        status = world.final_status(job.id, number)
        assert "exit code 3" in status.body and "the log is on the job's record" in status.body
        assert LEAK not in status.body, status.body
        sha = world.double.branch_sha(FORK, "patch")
        for run in world.completed_runs(str(sha)):
            assert LEAK not in str(run.output), run.output
        assert LEAK in job.result["setup_log"] and job.result["trust"] == "untrusted"
        # The same setup on a maintainer's own head: the index is reached, the log shown.
        mine = pull(world, "alice", "mine")
        trusted = world.wait(world.comment("/agent review", "alice", mine))
        assert trusted.state == JobState.FAILED, trusted.result
        assert index.requests and all(a.startswith("Basic ") for _, a in index.requests)
        assert LEAK in world.final_status(trusted.id, mine).body


def test_an_outsider_s_head_gets_public_egress_only_and_leaves_no_snapshot(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, index: PackageIndex
) -> None:
    """`untrusted_egress: public`: the list without the private index or credentials. bob
    (read) opened the pull request from a branch here; alice (write) asks for the review."""
    download = f"pip download --no-deps -d /tmp/d onloop-demo > /workspace/.dl 2>&1; echo {LEAK}"
    files = operator_files(tmp_path, index, "public")
    for world in make_world(github_double, database_url, tmp_path, **files):
        configure(world, download)
        world.authorize("alice")
        number = pull(world, "bob", "outsider")
        job = world.wait(world.comment("/agent review", "alice", number))
        assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
        assert index.requests == []  # the private index is refused to it, by address
        assert snapshots(world) == []
        # alice's own head, same setup: the index with credentials, and a snapshot kept.
        mine = pull(world, "alice", "mine")
        trusted = world.wait(world.comment("/agent review", "alice", mine))
        assert trusted.state == JobState.SUCCEEDED, trusted.result
        assert index.requests and all(a.startswith("Basic ") for _, a in index.requests)
        assert len(snapshots(world)) == 1
