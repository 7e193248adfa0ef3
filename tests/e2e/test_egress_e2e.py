"""A job whose `sandbox.setup` installs from an HTTPS private index, end to end: the operator's
credentials and CA files (ONLOOP_EGRESS_*), the organisation's egress list, the worker's
proxy adding the credentials, and the status comment when the index's CA is not trusted."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store.models import JobState
from tasks.sandbox.egress.tls import JobTls, make_job_tls
from tests.doubles.github.double import GitHubDouble
from tests.doubles.package_index import PackageIndex
from tests.e2e.world import REPO, World, make_world

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PASSWORD = "e2e-index-pw-31337"


@pytest.fixture
def company(host_ip: str) -> JobTls:
    """The private index's CA (a company CA) and its certificate for this machine."""
    return make_job_tls([host_ip])


@pytest.fixture
def private(host_ip: str, company: JobTls, tmp_path: Path) -> Iterator[PackageIndex]:
    cert, key = tmp_path / "index.pem", tmp_path / "index.key"
    cert.write_bytes(company.certs[host_ip])
    key.write_bytes(company.key_pem)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)
    with PackageIndex(host_ip, auth=f"reader:{PASSWORD}", tls=served) as index:
        index.add("onloop-private", module="VALUE = 7\n")
        yield index


def operator_files(tmp_path: Path, index: PackageIndex, ca: bytes) -> dict[str, Path]:
    """The settings an operator writes: credentials, CA bundle, organisation defaults."""
    creds, bundle, org = tmp_path / "creds.yml", tmp_path / "ca.pem", tmp_path / "org.yml"
    creds.write_text(f"{index.url}: {{username: reader, password: {PASSWORD}}}\n")
    bundle.write_bytes(ca)
    org.write_text(
        f"sandbox:\n  egress: [pypi, '{index.url}/simple/']\n  private_indexes: ['{index.url}']\n"
    )
    return {"egress_credentials_file": creds, "egress_ca_file": bundle, "config_file": org}


def pull_request(world: World, index: PackageIndex) -> int:
    setup = "pip install -r requirements.txt && python3 -c 'import onloop_private'"
    config = f"sandbox:\n  setup: \"{setup}\"\n  egress: ['{index.url}/simple/']\n"
    world.double.commit(
        REPO,
        "main",
        {
            ".github/onloop.yml": config,
            "requirements.txt": "onloop-private\n",
            "pyproject.toml": "[tool.ruff]\n",
        },
    )
    world.double.create_branch(REPO, "more")
    world.double.commit(REPO, "more", {"more.py": '"""More."""\n'}, message="More")
    return world.double.create_pull(REPO, "more", title="More", user="alice").number


def test_setup_installs_from_the_private_index_with_the_operator_s_credentials(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    private: PackageIndex,
    company: JobTls,
) -> None:
    files = operator_files(tmp_path, private, company.ca_pem)
    for world in make_world(github_double, database_url, tmp_path, **files):
        number = pull_request(world, private)
        world.authorize("alice")
        job = world.wait(world.comment("/agent review", "alice", number))
        assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
        assert private.requests and all(a.startswith("Basic ") for _, a in private.requests)
        assert PASSWORD not in world.worker.output()
        status = world.final_status(job.id, number)
        assert "**Done**" in status.body and PASSWORD not in status.body


def test_an_untrusted_index_certificate_is_explained_in_the_status(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    private: PackageIndex,
) -> None:
    other = make_job_tls(["unrelated.example.com"]).ca_pem  # not the index's CA
    files = operator_files(tmp_path, private, other)
    for world in make_world(github_double, database_url, tmp_path, **files):
        number = pull_request(world, private)
        world.authorize("alice")
        job = world.wait(world.comment("/agent review", "alice", number))
        assert job.state == JobState.FAILED, (job.result, world.worker.output())
        assert private.requests == []  # nothing reached it, credentials least of all
        status = world.final_status(job.id, number)
        target = private.url.removeprefix("https://")
        assert f"could not verify the certificate of {target}" in status.body, status.body
        assert "ONLOOP_EGRESS_CA_FILE" in status.body
