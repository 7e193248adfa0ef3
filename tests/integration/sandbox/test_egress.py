"""Setup's network: only allowlisted hosts through the job's own proxy (with the proxy adding an
index's credentials), refusals recorded on the job, no network at all after setup, and every
job network and proxy removed with the job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.policy.egress import EgressIndex, narrow_egress
from app.policy.repo_config import ConfigError, parse_repo_config
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits, Sandbox
from tasks.sandbox.egress.gateway import (
    PROXY_PORT,
    EgressGateway,
    EgressPolicy,
    Refusal,
    load_credentials,
    parse_refusals,
    refusal_message,
)
from tasks.sandbox.job import SetupFailed, job_sandbox
from tests.doubles.git_server import GitServer, make_repo
from tests.doubles.package_index import PackageIndex
from tests.doubles.sandboxes import new_job_id

PROBE = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        print(target, "reached")
    except ConnectionRefusedError:
        print(target, "reached (refused)")
    except OSError as exc:
        print(target, "blocked", exc)
"""


def probe(box: Sandbox, *targets: str) -> str:
    """Try a TCP connection to each host:port from inside the sandbox; the report."""
    done = box.exec(["python3", "-c", PROBE, *targets])
    assert done.ok, done
    return done.stdout


def leftovers(client: Any, job: int) -> list[str]:
    label = {"label": f"onloop.job={job}"}
    nets = [n.name for n in client.networks.list(filters=label)]
    return nets + [c.name for c in client.containers.list(all=True, filters=label)]


# -- config and policy (no Docker) ---------------------------------------------------------


def test_policy_env_and_credentials_never_reach_the_sandbox_env() -> None:
    creds = load_credentials(
        "http://10.1.2.3:8080/simple/: {username: u, password: secret-pw}\n"
        "https://pkgs.example.com: {token: tok-123}\n"
    )
    policy = EgressPolicy.from_entries(
        ["pypi", "npm", "http://10.1.2.3:8080/simple/", "https://pkgs.example.com"], creds
    )
    assert policy.allow == {
        ("pypi.org", 443),
        ("files.pythonhosted.org", 443),
        ("registry.npmjs.org", 443),
        ("10.1.2.3", 8080),
        ("pkgs.example.com", 443),
    }
    env = policy.env("http://proxy:3128", cache=True)
    assert env["PIP_INDEX_URL"] == "https://pypi.org/simple/"
    assert env["PIP_EXTRA_INDEX_URL"] == "http://10.1.2.3:8080/simple/"
    assert env["PIP_TRUSTED_HOST"] == "10.1.2.3:8080"
    assert env["npm_config_registry"] == "https://registry.npmjs.org/"
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://proxy:3128"
    assert env["PIP_CACHE_DIR"].startswith("/opt/onloop-cache/")
    assert "secret" not in repr(env) and "tok-123" not in repr(env) and "Basic" not in repr(env)
    # Credentials apply to listed hosts only; the proxy opens the TLS of an HTTPS one alone,
    # and setup then trusts the job's CA (a file with no secret in it).
    assert set(policy.document()["auth"]) == {"10.1.2.3:8080", "pkgs.example.com:443"}
    assert policy.document()["intercept"] == ["pkgs.example.com:443"]
    assert policy.intercepted_hosts() == ["pkgs.example.com"]
    assert env["PIP_CERT"] == env["SSL_CERT_FILE"] == "/opt/onloop-trust/bundle.pem"
    assert env["NODE_EXTRA_CA_CERTS"] == "/opt/onloop-trust/ca.pem"
    assert policy.document()["literal"] == ["10.1.2.3"]
    elsewhere = load_credentials("https://other.example.com: {token: t}")
    unlisted = EgressPolicy.from_entries(["pypi"], elsewhere)
    assert not unlisted.auth and not unlisted.intercept
    assert "PIP_CERT" not in unlisted.env("http://p:1", cache=False)
    only_npm = EgressPolicy.from_entries([EgressIndex(url="https://npm.corp/r/", index="npm")])
    assert only_npm.env("http://p:1", cache=False)["npm_config_registry"] == "https://npm.corp/r/"
    assert "PIP_INDEX_URL" not in only_npm.env("http://p:1", cache=False)
    assert not EgressPolicy.from_entries([])


def test_a_repository_narrows_the_organisation_list_but_never_widens_it() -> None:
    config, unknown = parse_repo_config(
        "sandbox:\n  egress: [pypi, 'https://pkgs.example.com',"
        " {url: 'https://npm.corp/', index: npm}]\n"
    )
    assert unknown == [] and config.sandbox.egress is not None
    kept, dropped = narrow_egress(["pypi", "https://npm.corp"], config.sandbox.egress)
    assert kept == ["pypi", EgressIndex(url="https://npm.corp/", index="npm")]
    assert dropped == ["https://pkgs.example.com"]
    assert narrow_egress(None, None) == (["pypi", "npm"], [])  # the built-in default
    assert narrow_egress(["pypi"], None) == (["pypi"], [])
    assert narrow_egress([], ["pypi"]) == ([], ["pypi"])
    covered = ["https://pypi.org/", "https://files.pythonhosted.org"]
    assert narrow_egress(covered, ["pypi"]) == (["pypi"], [])
    for bad in ("[ftp://x]", "[pipy]", "['https://u:p@pkgs.example.com']"):
        with pytest.raises(ConfigError):
            parse_repo_config(f"sandbox:\n  egress: {bad}\n")


def test_refusals_are_read_from_the_proxy_log_and_explained() -> None:
    log = (
        'onloop-egress-refused {"host": "evil.test", "port": 443, "why": "not on the allowlist"}\n'
        "2026-01-01 [W] something else\n"
        'onloop-egress-refused {"host": "evil.test", "port": 443, "why": "not on the allowlist"}\n'
        'onloop-egress-refused {"host": "10.0.0.9", "port": 8080, "why": "not on the allowlist"}\n'
        "onloop-egress-refused {not json\n"
        ' onloop-egress-refused {"host": "indented.test", "port": 1}\n'
    )
    refused = parse_refusals(log)
    assert refused == [Refusal("evil.test", 443), Refusal("10.0.0.9", 8080)]
    assert refusal_message(refused) == (
        "setup tried to reach evil.test, 10.0.0.9:8080; "
        "allow them in .github/onloop.yml under sandbox.egress"
    )
    assert refusal_message([]) == ""


# -- on real Docker --------------------------------------------------------------------------


@pytest.fixture
def index(host_ip: str) -> Iterator[PackageIndex]:
    with PackageIndex(host_ip, auth="reader:index-pw-123") as served:
        served.add("onloop-demo", module="VALUE = 42\n")
        yield served


REQS = {"requirements.txt": "onloop-demo\n", "README": "demo\n"}


@pytest.mark.docker
@pytest.mark.slow
def test_setup_installs_from_the_allowlisted_index_then_the_sandbox_has_no_network(
    docker_client: Any,
    gateway: EgressGateway,
    index: PackageIndex,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend
    from tasks.sandbox.snapshots import SnapshotStore

    gateway.credentials = load_credentials(
        f"{index.url}: {{username: reader, password: index-pw-123}}"
    )
    policy = gateway.policy([f"{index.url}/simple/"], private=[index.url])
    index_target = index.url.removeprefix("http://")
    setup = (
        "env > /workspace/.setup-env && echo ${HTTP_PROXY#http://} > /workspace/.proxy && "
        f"python3 -c '{PROBE}' {index_target} > /workspace/.direct && "
        "pip install --quiet -r requirements.txt"
    )
    cache = RepoCache(tmp_path / "cache")
    store = SnapshotStore(docker_client, tmp_path / "snapshots", max_bytes=10 * 2**30)
    backend = DockerBackend(docker_client)
    made: list[str] = []
    common: dict[str, Any] = {
        "image": gateway.proxy_image,
        "token": token,
        "setup": setup,
        "snapshots": store,
        "workspace_root": tmp_path / "jobs",
        "gateway": gateway,
        "egress": policy,
        "limits": Limits(command_timeout=300),
    }
    wheel = "onloop_demo-1.0-py3-none-any.whl"
    try:
        for n, repo in enumerate(("o/first", "o/second")):
            sha = make_repo(git_server.root / f"{repo}.git", REQS)
            job = new_job_id()
            url = git_server.url(repo)
            with job_sandbox(
                backend, cache, job_id=job, repo=repo, clone_url=url, rev=sha, **common
            ) as js:
                assert js.setup is not None and js.setup.ok, js.setup
                assert js.refused == []
                made.append(str(js.snapshot))
                box = js.sandbox
                assert (
                    box.exec("python -c 'import onloop_demo; print(onloop_demo.VALUE)'").stdout
                    == "42\n"
                )
                # During setup the index was reachable only through the proxy...
                direct = box.exec("cat .direct").stdout
                assert f"{index_target} blocked" in direct, direct
                # ...which added the index's credentials; the sandbox never had them.
                setup_env = box.exec("cat .setup-env").stdout
                assert "PIP_INDEX_URL=" in setup_env and "HTTP_PROXY=" in setup_env
                assert "index-pw-123" not in setup_env and "Basic " not in setup_env
                # After setup: no network at all, not even to the index or the proxy.
                proxy = box.exec("cat .proxy").stdout.strip()
                report = probe(box, index_target, proxy, f"{index_target.split(':')[0]}:22")
                assert "reached" not in report and report.count("blocked") == 3, report
                devices = box.exec("cat /proc/net/dev").stdout
                assert [d.split(":")[0].strip() for d in devices.splitlines()[2:]] == ["lo"]
                # The job's network and proxy are gone once setup is done.
                assert leftovers(docker_client, job) == [box.container.name]  # type: ignore[attr-defined]
            assert leftovers(docker_client, job) == []
            # The second repository's setup took the wheel from the worker's download cache.
            assert index.downloads(wheel) == 1, index.requests
            assert any((tmp_path / "dl" / "pip").iterdir())
        tries = [path for path, _ in index.requests]
        assert all(auth.startswith("Basic ") for _, auth in index.requests), index.requests
        assert tries.count("/simple/onloop-demo/") == 2
    finally:
        for ref in made:
            try:
                docker_client.images.remove(ref)
            except Exception:
                pass


@pytest.mark.docker
def test_a_host_not_on_the_list_is_refused_and_recorded_on_the_job(
    docker_client: Any,
    gateway: EgressGateway,
    index: PackageIndex,
    host_ip: str,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend

    with PackageIndex(host_ip) as other:
        other.add("onloop-demo")
        other_target = other.url.removeprefix("http://")
        setup = (
            "python3 -c \"import urllib.request as u; u.urlopen('https://registry.test.invalid/')\""
            f" ; pip download --no-deps -d /tmp/d --index-url {other.url}/simple/"
            f" --trusted-host {other_target} onloop-demo"
        )
        sha = make_repo(git_server.root / "o" / "r.git", REQS)
        job = new_job_id()
        with pytest.raises(SetupFailed) as err:
            with job_sandbox(
                DockerBackend(docker_client),
                RepoCache(tmp_path / "cache"),
                job_id=job,
                repo="o/r",
                clone_url=git_server.url("o/r"),
                rev=sha,
                image=gateway.proxy_image,
                workspace_root=tmp_path / "jobs",
                token=token,
                setup=setup,
                gateway=gateway,
                egress=gateway.policy([f"{index.url}/simple/"], private=[index.url]),
                limits=Limits(command_timeout=120),
            ):
                pass
        assert other.requests == []  # refused at the proxy: nothing reached it
    refused = {(r.host, r.port) for r in err.value.refused}
    assert refused == {("registry.test.invalid", 443), (host_ip, other.httpd.server_address[1])}
    assert f"setup tried to reach registry.test.invalid, {other_target}" in err.value.hint
    assert "allow them in .github/onloop.yml under sandbox.egress" in err.value.hint
    assert err.value.result.exit_code != 0
    assert leftovers(docker_client, job) == []


@pytest.mark.docker
def test_jobs_cannot_reach_each_other_nor_the_host_directly(
    docker_client: Any, gateway: EgressGateway, index: PackageIndex, tmp_path: Path
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend, exec_ids

    backend = DockerBackend(docker_client)
    limits = Limits(command_timeout=60)
    policy = gateway.policy([f"{index.url}/simple/"], private=[index.url])
    jobs = [new_job_id(), new_job_id()]
    boxes: list[Sandbox] = []
    with (
        gateway.session(jobs[0], policy, *exec_ids(limits)) as a,
        gateway.session(jobs[1], policy, *exec_ids(limits)) as b,
    ):
        for job, net in zip(jobs, (a, b), strict=True):
            ws = tmp_path / str(job)
            ws.mkdir()
            boxes.append(backend.start(job, gateway.proxy_image, ws, limits, network=net.network))
        try:
            b.proxy.reload()
            b_nets = b.proxy.attrs["NetworkSettings"]["Networks"]
            b_egress = f"{b_nets['onloop-egress']['IPAddress']}:{PROXY_PORT}"
            b_job_net = f"{b_nets[b.network]['IPAddress']}:{PROXY_PORT}"
            index_target = index.url.removeprefix("http://")
            host_ssh = f"{index_target.split(':')[0]}:22"
            report = probe(boxes[0], b_egress, b_job_net, index_target, host_ssh)
            assert "reached" not in report and report.count("blocked") == 4, report
            # Job A's proxy itself cannot reach job B's proxy (no traffic between containers on
            # the shared egress network)...
            host, port = b_egress.split(":")
            done = a.proxy.exec_run(["python3", "-c", PROBE, b_egress])
            assert b"blocked" in done.output and b"reached" not in done.output, done.output
            # ...and asking it to is refused, and recorded.
            fetch = (
                "import urllib.request as u\n"
                f"try: u.urlopen('http://{host}:{port}/', timeout=10)\n"
                "except Exception as e: print(e)\n"
            )
            tried = boxes[0].exec(["python3", "-c", fetch], env=a.env)
            assert "403" in tried.stdout, tried
            assert Refusal(host, int(port)) in a.refused()
            assert b.refused() == []
            # The proxy's own log file and config are not reachable from the sandbox either.
            assert boxes[0].exec("ls /opt/onloop-egress").exit_code != 0
        finally:
            for box in boxes:
                box.stop()
    for job in jobs:
        assert leftovers(docker_client, job) == []


@pytest.mark.docker
def test_the_reaper_removes_a_dead_job_s_network_and_proxy(
    docker_client: Any, gateway: EgressGateway
) -> None:
    from tasks.sandbox.reaper import reap

    job = new_job_id()
    session = gateway.session(job, EgressPolicy.from_entries(["pypi"]), 1000, 1000)
    net = session.__enter__()
    try:
        names = set(leftovers(docker_client, job))
        assert net.network in names and net.proxy.name in names
        assert not set(reap(docker_client, lambda _job: True, min_age=0)) & names
        removed = reap(docker_client, lambda j: j != job, min_age=0)
        assert names <= set(removed)
        assert leftovers(docker_client, job) == []
    finally:
        session.__exit__(None, None, None)  # what is already gone is fine
