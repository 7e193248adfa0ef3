"""Code from an untrusted head (a fork's, or an outsider's) and what setup may reach: no operator
credentials, no private index, no download cache, no snapshot; the proxy refuses local and
private addresses however they are spelt; credentials go on reads only."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits, Sandbox
from tasks.sandbox.egress.gateway import PLUGIN, EgressGateway, load_credentials
from tasks.sandbox.job import job_sandbox
from tasks.sandbox.snapshots import REPO_LABEL, SnapshotStore, snapshot_key
from tasks.sandbox.trust import HeadTrust
from tests.doubles.git_server import GitServer, make_repo
from tests.doubles.package_index import PackageIndex
from tests.doubles.sandboxes import new_job_id

PASSWORD = "untrusted-pw-4242"
NEVER = "resolves to a loopback, link-local or other local address"
UNRESOLVED = "its name does not resolve"
PRIVATE = "resolves to a private address (an operator may allow a private index by name)"
# Asks the proxy for each URL with each method; prints "METHOD URL STATUS" per line.
FETCH = """
import sys, urllib.request as u, urllib.error as e
for arg in sys.argv[1:]:
    method, url = arg.split(" ", 1)
    data = b"payload" if method in ("POST", "PUT") else None
    try:
        status = u.urlopen(u.Request(url, data=data, method=method), timeout=20).status
    except e.HTTPError as exc:
        status = exc.code
    except Exception as exc:
        status = type(exc).__name__
    print(method, url, status)
"""


def fetch(box: Sandbox, env: dict[str, str], *requests: str) -> dict[str, str]:
    """{"METHOD URL": status} for each "METHOD URL" asked through the job's proxy."""
    done = box.exec(["python3", "-c", FETCH, *requests], env=env)
    assert done.ok, done
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in done.stdout.splitlines()}


@pytest.fixture
def index(host_ip: str) -> Iterator[PackageIndex]:
    with PackageIndex(host_ip, auth=f"reader:{PASSWORD}") as served:
        served.add("onloop-demo", module="VALUE = 42\n")
        yield served


@pytest.fixture
def credentialed(gateway: EgressGateway, index: PackageIndex) -> EgressGateway:
    gateway.credentials = load_credentials(
        f"{index.url}: {{username: reader, password: {PASSWORD}}}"
    )
    return gateway


# -- keys and policies (no container) ----------------------------------------------------------


def test_snapshot_keys_differ_across_installations_and_trust_levels() -> None:
    blobs = [("requirements.txt", "abc123")]
    keys = {
        snapshot_key("sha256:base", "pip install -r requirements.txt", blobs, scope=s, trust=t)
        for s in ("installation-1", "installation-2")
        for t in HeadTrust
    }
    assert len(keys) == 4
    same = snapshot_key("sha256:base", "pip install -r requirements.txt", blobs)
    assert same == snapshot_key("sha256:base", "pip install -r requirements.txt", blobs)


def test_an_untrusted_head_s_policy_has_no_credentials_private_index_or_cache(
    credentialed: EgressGateway, index: PackageIndex
) -> None:
    entries = [f"{index.url}/simple/"]
    trusted = credentialed.policy(entries, "installation-7", private=[index.url])
    assert trusted.auth and trusted.private and trusted.shared_cache
    untrusted = credentialed.policy(
        entries, "installation-7", private=[index.url], trust=HeadTrust.UNTRUSTED
    )
    assert untrusted.allow == trusted.allow
    assert not untrusted.auth and not untrusted.private and not untrusted.shared_cache
    assert untrusted.document()["auth"] == {} and untrusted.document()["private"] == []
    assert PASSWORD not in json.dumps(untrusted.document())


# -- the real proxy and sandbox ----------------------------------------------------------------


@pytest.mark.docker
def test_the_egress_check_unwraps_mapped_addresses_and_refuses_private_ones(
    docker_client: Any, gateway: EgressGateway
) -> None:
    """The proxy's own address check, run by the proxy image's Python on plugin.py itself."""
    cases = {
        "::ffff:127.0.0.1": NEVER,
        "::ffff:169.254.169.254": NEVER,
        "169.254.169.254": NEVER,
        "127.0.0.1": NEVER,
        "::1": NEVER,
        "0.0.0.0": NEVER,
        "224.0.0.1": NEVER,
        "2002:7f00:1::": NEVER,  # 6to4 of 127.0.0.1
        "64:ff9b::a9fe:a9fe": NEVER,  # NAT64 of 169.254.169.254
        "::127.0.0.1": NEVER,  # IPv4-compatible
        "10.1.2.3": PRIVATE,
        "172.17.0.1": PRIVATE,
        "192.168.1.1": PRIVATE,
        "100.64.0.1": PRIVATE,  # shared address space (CGNAT)
        "::ffff:10.0.0.1": PRIVATE,
        "fd00::1": PRIVATE,
        "151.101.0.223": None,  # a public address (pypi.org's CDN)
        "2a04:4e42::223": None,
    }
    code = (
        "import json, onloop_egress as p\n"
        f"cases = {json.dumps(list(cases))}\n"
        "print(json.dumps({c: [p.blocked_address(c), p.blocked_address(c, True)] "
        "for c in cases}))\n"
    )
    out = docker_client.containers.run(
        gateway.proxy_image,
        entrypoint=["/opt/tools/bin/python3", "-c", code],
        environment={"PYTHONPATH": "/opt/plugin"},
        mounts=[Mount("/opt/plugin/onloop_egress.py", str(PLUGIN), type="bind", read_only=True)],
        network_mode="none",
        remove=True,
        user="1000:1000",
    )
    found = json.loads(out)
    for address, why in cases.items():
        assert found[address][0] == why, (address, found[address])
        # An operator's private index may be private, never loopback or link-local.
        assert found[address][1] == (NEVER if why == NEVER else None), (address, found[address])


@pytest.mark.docker
def test_the_proxy_refuses_mapped_loopback_metadata_and_private_addresses(
    docker_client: Any, gateway: EgressGateway, index: PackageIndex, host_ip: str, tmp_path: Path
) -> None:
    """Each target is on the allowlist, so only the address check stands between setup and
    it: ::ffff:127.0.0.1 (the proxy itself), the metadata address in both spellings, the
    test index at its private address, and a name that Docker's DNS resolves to one."""
    from tasks.sandbox.docker_backend import DockerBackend, exec_ids

    port = index.httpd.server_address[1]
    peer_name = f"onloop-test-peer-{secrets.token_hex(3)}"
    peer = docker_client.containers.run(
        gateway.proxy_image,
        entrypoint=["sleep", "120"],
        name=peer_name,
        network=gateway.egress_network(),
        detach=True,
        remove=True,
    )
    targets = {
        "http://[::ffff:127.0.0.1]:3128/": NEVER,
        "http://[::ffff:169.254.169.254]/": NEVER,
        "http://169.254.169.254/": NEVER,
        f"http://[::ffff:{host_ip}]:{port}/simple/": PRIVATE,
        f"http://{host_ip}:{port}/simple/": PRIVATE,
        f"http://{peer_name}:8080/": PRIVATE,
        # Refused, not handed back to proxy.py to look up again unchecked (a rebinding window)
        "http://no-such-host.invalid/": UNRESOLVED,
    }
    limits = Limits(command_timeout=120)
    try:
        policy = gateway.policy(list(targets))
        job = new_job_id()
        with gateway.session(job, policy, *exec_ids(limits)) as net:
            (tmp_path / "ws").mkdir()
            box = DockerBackend(docker_client).start(
                job, gateway.proxy_image, tmp_path / "ws", limits, network=net.network
            )
            try:
                seen = fetch(box, net.env, *(f"GET {url}" for url in targets))
            finally:
                box.stop()
            refused = net.refused()
        # Refused while connecting: proxy.py answers 502 Bad Gateway, nothing was reached.
        assert set(seen.values()) == {"502"}, (seen, refused)
        assert index.requests == []
        why = {(r.host, r.port): r.why for r in refused}
        assert why[("::ffff:127.0.0.1", 3128)] == NEVER
        assert why[("::ffff:169.254.169.254", 80)] == NEVER
        assert why[("169.254.169.254", 80)] == NEVER
        assert why[(f"::ffff:{host_ip}", port)] == PRIVATE
        assert why[(host_ip, port)] == PRIVATE
        assert why[(peer_name, 8080)] == PRIVATE
        assert why[("no-such-host.invalid", 80)] == UNRESOLVED
        # The operator names the index as private: now it is reached (and no other).
        allowed = gateway.policy(list(targets), private=[index.url])
        job = new_job_id()
        with gateway.session(job, allowed, *exec_ids(limits)) as net:
            box = DockerBackend(docker_client).start(
                job, gateway.proxy_image, tmp_path / "ws", limits, network=net.network
            )
            try:
                seen = fetch(box, net.env, f"GET http://{host_ip}:{port}/simple/onloop-demo/")
                mapped = fetch(box, net.env, "GET http://[::ffff:127.0.0.1]:3128/")
            finally:
                box.stop()
        assert list(seen.values()) == ["401"], seen  # the index's answer: no credentials set
        assert list(mapped.values()) == ["502"], mapped
    finally:
        peer.remove(force=True)


@pytest.mark.docker
def test_credentials_go_only_on_get_and_head(
    docker_client: Any, credentialed: EgressGateway, index: PackageIndex, tmp_path: Path
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend, exec_ids

    policy = credentialed.policy([f"{index.url}/simple/"], private=[index.url])
    url = f"{index.url}/simple/onloop-demo/"
    limits = Limits(command_timeout=120)
    job = new_job_id()
    with credentialed.session(job, policy, *exec_ids(limits)) as net:
        (tmp_path / "ws").mkdir()
        box = DockerBackend(docker_client).start(
            job, credentialed.proxy_image, tmp_path / "ws", limits, network=net.network
        )
        try:
            seen = fetch(box, net.env, *(f"{m} {url}" for m in ("GET", "HEAD", "POST", "PUT")))
        finally:
            box.stop()
    assert seen == {f"GET {url}": "200", f"HEAD {url}": "200"} | {
        f"{m} {url}": "401" for m in ("POST", "PUT")
    }, seen
    auth = {method: header for method, _, header in index.methods}
    assert auth["GET"].startswith("Basic ") and auth["HEAD"].startswith("Basic ")
    assert auth["POST"] == "" and auth["PUT"] == "", index.methods


@pytest.mark.docker
@pytest.mark.slow
def test_an_untrusted_head_s_setup_reaches_no_private_index_and_leaves_nothing_behind(
    docker_client: Any,
    credentialed: EgressGateway,
    index: PackageIndex,
    host_ip: str,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
) -> None:
    """Even with `untrusted_egress: public` (a policy at all), an untrusted head's setup
    gets no credentials, no private index and no download cache, runs on a read-only root
    (it cannot touch the tool directories) and no snapshot is made of it."""
    from tasks.sandbox.docker_backend import DockerBackend

    gateway = credentialed
    scope = "installation-31"
    policy = gateway.policy(
        [f"{index.url}/simple/"], scope, private=[index.url], trust=HeadTrust.UNTRUSTED
    )
    setup = (
        "env > /workspace/.setup-env; "
        "for d in $(echo $PATH | tr : ' '); do touch $d/poison 2>/dev/null && echo wrote $d; done; "
        "pip download --no-deps -d /tmp/d onloop-demo; echo setup-done"
    )
    store = SnapshotStore(docker_client, tmp_path / "snapshots", max_bytes=10 * 2**30)
    repo = f"o/untrusted-{secrets.token_hex(3)}"
    sha = make_repo(git_server.root / f"{repo}.git", {"requirements.txt": "onloop-demo\n"})
    job = new_job_id()
    with job_sandbox(
        DockerBackend(docker_client),
        RepoCache(tmp_path / "cache"),
        job_id=job,
        repo=repo,
        clone_url=git_server.url(repo),
        rev=sha,
        image=gateway.proxy_image,
        workspace_root=tmp_path / "jobs",
        token=token,
        setup=setup,
        snapshots=store,
        gateway=gateway,
        egress=policy,
        limits=Limits(command_timeout=300),
        trust=HeadTrust.UNTRUSTED,
        scope=scope,
    ) as js:
        assert js.setup is not None and "setup-done" in js.setup.output, js.setup
        assert "wrote" not in js.setup.output, js.setup.output
        env = js.sandbox.exec("cat .setup-env").stdout
        assert "HTTP_PROXY=" in env and "PIP_CACHE_DIR" not in env and PASSWORD not in env
        assert js.snapshot is None and js.image == gateway.proxy_image
        refused = {(r.host, r.port): r.why for r in js.refused}
    assert refused == {(host_ip, index.httpd.server_address[1]): PRIVATE}
    assert index.requests == []  # nothing reached the index, credentials least of all
    assert not (tmp_path / "dl" / scope).exists()
    assert docker_client.images.list(filters={"label": f"{REPO_LABEL}={repo}"}) == []
    assert not list((tmp_path / "snapshots").glob("*.used"))


@pytest.mark.docker
def test_no_job_sandbox_can_write_the_tool_directories(
    docker_client: Any, gateway: EgressGateway, tmp_path: Path
) -> None:
    """Every directory on PATH before the system's, in the job's own container."""
    from tasks.sandbox.docker_backend import DockerBackend

    (tmp_path / "ws").mkdir()
    box = DockerBackend(docker_client).start(
        new_job_id(), gateway.proxy_image, tmp_path / "ws", Limits(command_timeout=60)
    )
    try:
        path = box.exec("echo $PATH").stdout.strip().split(":")
        first = path[: path.index("/usr/local/sbin")]
        assert "/opt/venv/bin" in first and "/opt/tools/bin" in first, path
        for directory in first:
            done = box.exec(["sh", "-c", f"touch {directory}/poison && echo wrote"])
            assert "wrote" not in done.stdout and done.exit_code != 0, (directory, done)
        owners = box.exec(["stat", "-c", "%u %n", "/opt/tools/bin", "/opt/tools"]).stdout
        assert all(line.startswith("0 ") for line in owners.splitlines()), owners
    finally:
        box.stop()


# -- the image's tool directories --------------------------------------------------------------

TOOLS = {  # a project whose install puts a console script in /opt/venv/bin
    "pyproject.toml": (
        "[project]\nname = 'demo-tool'\nversion = '0.1'\n"
        "[project.scripts]\ndemo-tool = 'demo_tool:main'\n"
    ),
    "demo_tool.py": "def main() -> None:\n    print('the real tool')\n",
}


def path_before_system(run: Any, image: str) -> list[str]:
    path = run(image, ["sh", "-c", "echo $PATH"]).decode().strip().split(":")
    return path[: path.index("/usr/local/sbin")]


@pytest.mark.docker
def test_the_sandbox_user_cannot_write_the_image_s_tool_directories(
    docker_client: Any, image: str
) -> None:
    """Even with a writable root (as a snapshot's setup has), the sandbox user (1000) writes
    nothing on PATH before the system's; only the setup user owns /opt/venv."""

    def run(ref: str, command: list[str]) -> bytes:
        out = docker_client.containers.run(
            ref, command, user="1000:1000", network_mode="none", remove=True
        )
        return bytes(out)

    first = path_before_system(run, image)
    assert "/opt/venv/bin" in first and "/opt/tools/bin" in first, first
    for directory in first:
        done = run(image, ["sh", "-c", f"touch {directory}/poison 2>/dev/null && echo wrote; :"])
        assert b"wrote" not in done, directory
    owners = run(image, ["stat", "-c", "%u:%g %n", "/opt/venv", "/opt/venv/bin", "/opt/tools"])
    assert owners.decode().split("\n")[:3] == [
        "1001:1001 /opt/venv",
        "1001:1001 /opt/venv/bin",
        "0:0 /opt/tools",
    ]
    labels = docker_client.images.get(image).labels or {}
    assert labels.get("onloop.sandbox.setup-user") == "1001:1001"


@pytest.mark.docker
@pytest.mark.slow
def test_a_snapshot_s_installed_tools_are_not_the_sandbox_user_s(
    docker_client: Any, image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """A trusted head's setup installs a console script; in the snapshot it belongs to the
    setup user, so no later job can swap it, even given a writable root."""
    from tasks.sandbox.docker_backend import DockerBackend

    repo = f"o/tools-{secrets.token_hex(3)}"
    sha = make_repo(git_server.root / f"{repo}.git", TOOLS)
    store = SnapshotStore(docker_client, tmp_path / "snapshots", max_bytes=10 * 2**30)
    made = ""
    try:
        with job_sandbox(
            DockerBackend(docker_client),
            RepoCache(tmp_path / "cache"),
            job_id=new_job_id(),
            repo=repo,
            clone_url=git_server.url(repo),
            rev=sha,
            image=image,
            workspace_root=tmp_path / "jobs",
            token=token,
            setup="pip install --quiet --no-index --no-build-isolation -e .",
            snapshots=store,
            scope="installation-5",
        ) as js:
            assert js.setup is not None and js.setup.ok, js.setup
            made = str(js.snapshot)
            box = js.sandbox
            assert box.exec("demo-tool").stdout == "the real tool\n"
            assert box.exec("stat -c %u /opt/venv/bin/demo-tool").stdout == "1001\n"
            assert box.exec("stat -c %u /workspace/demo_tool.py").stdout.strip() != "1001"
        swap = "echo 'echo swapped' > /opt/venv/bin/demo-tool 2>/dev/null && echo wrote; :"
        out = docker_client.containers.run(
            made, entrypoint=["sh", "-c", swap], user="1000:1000", network_mode="none", remove=True
        )
        assert b"wrote" not in out
    finally:
        if made:
            docker_client.images.remove(made, force=True)
