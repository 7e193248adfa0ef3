"""Private index credentials: for HTTPS the setup proxy opens the TLS of a credentialed index
alone (after verifying it), adds the credentials there, and setup trusts it through a CA made
for the job that can vouch for nothing else; other HTTPS stays a tunnel, credentials follow
the connection's real upstream, and the sandbox never holds them."""

from __future__ import annotations

import hashlib
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits
from tasks.sandbox.egress.gateway import EgressGateway, Refusal, load_credentials, refusal_message
from tasks.sandbox.egress.policy import UNTRUSTED
from tasks.sandbox.egress.tls import JobTls, make_job_tls, proxy_flags
from tasks.sandbox.job import SetupFailed, job_sandbox
from tests.doubles.git_server import GitServer, make_repo
from tests.doubles.package_index import PackageIndex
from tests.doubles.sandboxes import new_job_id

# What setup sees of the TLS of each host:port it names: the certificate the other end shows
# through the proxy (sha256 of its DER), not verified.
PEEK = """
import hashlib, http.client, os, ssl, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTPS_PROXY"])
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    conn = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=20)
    conn.set_tunnel(host, int(port))
    conn.connect()
    print(target, hashlib.sha256(conn.sock.getpeercert(True)).hexdigest())
    conn.close()
"""


def _served(tls: JobTls, host: str) -> ssl.SSLContext:
    """A server context showing `tls`'s certificate for `host`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_bytes(tls.certs[host])
        key.write_bytes(tls.key_pem)
        ctx.load_cert_chain(cert, key)
    return ctx


def _fingerprint(pem: bytes) -> str:
    der = ssl.PEM_cert_to_DER_cert(pem.decode())
    return hashlib.sha256(der).hexdigest()


# -- the job CA (no Docker) -------------------------------------------------------------------


def test_the_job_ca_vouches_for_its_hosts_alone_and_its_key_is_gone(tmp_path: Path) -> None:
    tls = make_job_tls(["pkgs.example.com", "10.1.2.3", "pkgs.example.com"], 7)
    ca = x509.load_pem_x509_certificate(tls.ca_pem)
    constraints = ca.extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    permitted = {str(n.value) for n in constraints.value.permitted_subtrees or []}
    # Each name type is constrained (a type left out would be unconstrained): for DNS the one
    # host, for IP the one address.
    assert permitted == {"pkgs.example.com", "10.1.2.3/32"}
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    assert (ca.not_valid_after_utc - ca.not_valid_before_utc).days <= 1
    assert sorted(tls.certs) == ["10.1.2.3", "pkgs.example.com"]
    # The one private key written anywhere is the host certificates', not the CA's.
    files = tls.proxy_files(b"") | tls.trust_files()
    keys = [data for data in files.values() if b"PRIVATE KEY" in data]
    assert keys == [tls.key_pem]
    assert b"PRIVATE KEY" not in tls.trust_files()["bundle.pem"]
    for host, pem in tls.certs.items():
        leaf = x509.load_pem_x509_certificate(pem)
        assert leaf.public_key() != ca.public_key()
        (tmp_path / "ca.pem").write_bytes(tls.ca_pem)
        (tmp_path / "leaf.pem").write_bytes(pem)
        done = subprocess.run(
            ["openssl", "verify", "-CAfile", tmp_path / "ca.pem", tmp_path / "leaf.pem"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (host, done.stdout, done.stderr)
    # The flags name files the proxy gets, and no CA key (there is none).
    named = [f for f in proxy_flags("/c") if f.startswith("/c/")]
    assert {n.removeprefix("/c/") for n in named if "certs" not in n} <= set(files)
    with pytest.raises(ValueError):
        make_job_tls([])


# -- on real Docker ---------------------------------------------------------------------------


@pytest.fixture
def indexes(host_ip: str) -> Iterator[tuple[PackageIndex, PackageIndex, JobTls, JobTls]]:
    """Two HTTPS servers on this machine, each with a certificate from a CA of its own (a
    company CA, say): the index `private` needs credentials, `public` does not."""
    private_ca, public_ca = make_job_tls([host_ip]), make_job_tls([host_ip])
    private = PackageIndex(host_ip, auth="reader:tls-pw-456", tls=_served(private_ca, host_ip))
    public = PackageIndex(host_ip, tls=_served(public_ca, host_ip))
    with private, public:
        private.add("onloop-private", module="VALUE = 7\n")
        yield private, public, private_ca, public_ca


@pytest.mark.docker
@pytest.mark.slow
def test_setup_installs_from_an_https_index_with_credentials_the_proxy_adds(
    docker_client: Any,
    gateway: EgressGateway,
    indexes: tuple[PackageIndex, PackageIndex, JobTls, JobTls],
    host_ip: str,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend

    private, public, private_ca, public_ca = indexes
    gateway.credentials = load_credentials(
        f"{private.url}/simple/: {{username: reader, password: tls-pw-456}}"
    )
    gateway.upstream_ca = private_ca.ca_pem + public_ca.ca_pem
    policy = gateway.policy([f"{private.url}/simple/", public.url], private=[host_ip])
    assert policy.intercept == {private.url.removeprefix("https://")}
    targets = [index.url.removeprefix("https://") for index in (private, public)]
    setup = (
        "env > /workspace/.setup-env && cat /opt/onloop-trust/bundle.pem > /workspace/.trust && "
        f"python3 -c '{PEEK}' {' '.join(targets)} > /workspace/.peek && "
        "pip install --quiet -r requirements.txt && "
        "python3 -c 'import onloop_private; print(onloop_private.VALUE)' > /workspace/.value"
    )
    sha = make_repo(
        git_server.root / "o" / "r.git",
        {"requirements.txt": "onloop-private\n", "README": "demo\n"},
    )
    job = new_job_id()
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
        egress=policy,
        limits=Limits(command_timeout=300),
    ) as js:
        assert js.setup is not None and js.setup.ok, js.setup
        box = js.sandbox
        assert box.exec("cat .value").stdout == "7\n"
        # The index saw the credentials on every request.
        assert private.requests and all(a.startswith("Basic ") for _, a in private.requests)
        # Setup saw the proxy's certificate for the index, the real one for the other host:
        # its TLS went through untouched (setup does not trust its CA, so it fetched nothing).
        seen = dict(line.split() for line in box.exec("cat .peek").stdout.splitlines())
        private_real = _fingerprint(private_ca.certs[host_ip])
        public_real = _fingerprint(public_ca.certs[host_ip])
        assert seen[targets[0]] != private_real
        assert seen[targets[1]] == public_real
        # Setup's environment and trust hold no secret; after setup the trust mount is gone.
        setup_env = box.exec("cat .setup-env").stdout
        assert "tls-pw-456" not in setup_env and "Basic " not in setup_env
        assert "SSL_CERT_FILE=/opt/onloop-trust/bundle.pem" in setup_env
        assert "PRIVATE KEY" not in box.exec("cat .trust").stdout
        assert box.exec("ls /opt/onloop-trust").exit_code != 0
    label = {"label": f"onloop.job={job}"}
    assert docker_client.containers.list(all=True, filters=label) == []
    assert not list((tmp_path / "egress").glob("trust-*"))
    assert not list((tmp_path / "egress").glob("proxy-*"))


# Two requests on one connection to the proxy: the first for `a`, the second naming `b`.
TWO_ON_ONE = """
import os, socket, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["HTTP_PROXY"])
conn = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
for target, path in ((sys.argv[1], "/simple/nothing/"), (sys.argv[2], "/simple/onloop-demo/")):
    conn.sendall(f"GET http://{target}{path} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += conn.recv(65536)
    top, _, body = head.partition(b"\\r\\n\\r\\n")
    size = int(top.lower().split(b"content-length:")[1].split(b"\\r\\n")[0])
    while len(body) < size:
        body += conn.recv(65536)
    print(top.split(b"\\r\\n")[0].decode())
"""


@pytest.mark.docker
def test_credentials_follow_the_connection_s_upstream_not_the_request_s_host(
    gateway: EgressGateway, host_ip: str, tmp_path: Path
) -> None:
    """A later request on a kept-alive connection that names the credentialed index still
    goes where the connection goes: it must not carry that index's credentials there."""
    from tasks.sandbox.docker_backend import DockerBackend, exec_ids

    with (
        PackageIndex(host_ip, auth="reader:keep-pw-789") as private,
        PackageIndex(host_ip) as other,
    ):
        private.add("onloop-demo")
        gateway.credentials = load_credentials(
            f"{private.url}: {{username: reader, password: keep-pw-789}}"
        )
        policy = gateway.policy([f"{private.url}/simple/", other.url], private=[host_ip])
        limits = Limits(command_timeout=60)
        job = new_job_id()
        with gateway.session(job, policy, *exec_ids(limits)) as net:
            backend = DockerBackend(gateway.client)
            (tmp_path / "ws").mkdir()
            box = backend.start(
                job, gateway.proxy_image, tmp_path / "ws", limits, network=net.network
            )
            try:
                a, b = (i.url.removeprefix("http://") for i in (other, private))
                done = box.exec(["python3", "-c", TWO_ON_ONE, a, b], env=net.env)
                assert done.ok, done
            finally:
                box.stop()
    # Both requests reached `other` (proxy.py keeps a connection's upstream), neither with
    # the private index's credentials.
    assert [path for path, _ in other.requests] == ["/simple/nothing/", "/simple/onloop-demo/"]
    assert all(auth == "" for _, auth in other.requests), other.requests
    assert private.requests == []


@pytest.mark.docker
def test_an_index_whose_certificate_does_not_verify_gets_no_credentials_and_is_explained(
    gateway: EgressGateway,
    indexes: tuple[PackageIndex, PackageIndex, JobTls, JobTls],
    host_ip: str,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend

    private = indexes[0]
    gateway.credentials = load_credentials(
        f"{private.url}: {{username: reader, password: tls-pw-456}}"
    )
    # No ONLOOP_EGRESS_CA_FILE: the index's company CA is not among the public ones.
    sha = make_repo(git_server.root / "o" / "r.git", {"requirements.txt": "onloop-private\n"})
    with pytest.raises(SetupFailed) as err:
        with job_sandbox(
            DockerBackend(gateway.client),
            RepoCache(tmp_path / "cache"),
            job_id=new_job_id(),
            repo="o/r",
            clone_url=git_server.url("o/r"),
            rev=sha,
            image=gateway.proxy_image,
            workspace_root=tmp_path / "jobs",
            token=token,
            setup="pip install --quiet --retries 0 -r requirements.txt",
            gateway=gateway,
            egress=gateway.policy([f"{private.url}/simple/"], private=[host_ip]),
            limits=Limits(command_timeout=120),
        ):
            pass
    assert private.requests == []  # nothing, credentials least of all, reached it
    port = private.httpd.server_address[1]
    assert err.value.refused == [Refusal(host_ip, port, UNTRUSTED)]
    assert err.value.hint == (
        f"the setup proxy could not verify the certificate of {host_ip}:{port}, so it sent no "
        "credentials there; onloop's operator can add the CA that signed it to "
        "ONLOOP_EGRESS_CA_FILE"
    )
    both = [Refusal("evil.test", 443), *err.value.refused]
    assert refusal_message(both).startswith("setup tried to reach evil.test; allow it in")
    assert "; the setup proxy could not verify" in refusal_message(both)


@pytest.mark.docker
def test_an_https_index_s_credentials_never_go_in_a_plain_request(
    gateway: EgressGateway, host_ip: str, tmp_path: Path
) -> None:
    """Setup asks the proxy for http://<the HTTPS index's host:port>/: allowed (the pair is
    on the list), but the credentials would travel in clear to whatever answers there."""
    from tasks.sandbox.docker_backend import DockerBackend, exec_ids

    with PackageIndex(host_ip, auth="reader:clear-pw-000") as answers:  # plain, at that port
        answers.add("onloop-demo")
        target = answers.url.removeprefix("http://")
        gateway.credentials = load_credentials(
            f"https://{target}: {{username: reader, password: clear-pw-000}}"
        )
        policy = gateway.policy([f"https://{target}/simple/"], private=[host_ip])
        assert policy.intercept == {target}
        limits = Limits(command_timeout=60)
        job = new_job_id()
        fetch = (
            "import urllib.request as u\n"
            f"try: u.urlopen('http://{target}/simple/onloop-demo/', timeout=20)\n"
            "except Exception as e: print(e)\n"
        )
        with gateway.session(job, policy, *exec_ids(limits)) as net:
            (tmp_path / "ws").mkdir()
            box = DockerBackend(gateway.client).start(
                job, gateway.proxy_image, tmp_path / "ws", limits, network=net.network
            )
            try:
                done = box.exec(["python3", "-c", fetch], env=net.env)
            finally:
                box.stop()
    assert "401" in done.stdout, done
    assert answers.requests == [("/simple/onloop-demo/", "")]
