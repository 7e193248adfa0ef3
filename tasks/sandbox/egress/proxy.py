"""The setup proxy's container: its files (plugin, policy, TLS), its start and its address."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from tasks.sandbox.base import SandboxError
from tasks.sandbox.docker_backend import remove_container
from tasks.sandbox.egress.policy import EgressPolicy
from tasks.sandbox.egress.tls import make_job_tls

PROXY_PORT = 3128
PROXY_IMAGE = "onloop-sandbox:latest"  # has proxy.py in /opt/tools (config/sandbox/tools.txt)
PLUGIN = Path(__file__).with_name("plugin.py")
READY_MARK = "onloop-egress-ready"
PROXY_UID = 65532  # the proxy's own user when the worker is root
CONF = "/opt/onloop-egress"  # the proxy's plugin, policy and TLS material (read-only)


def proxy_uid() -> int:
    """The uid the proxy runs as and owns its files with."""
    return PROXY_UID if os.geteuid() == 0 else os.geteuid()


def write_conf(
    conf: Path, policy: EgressPolicy, trust: Path, job_id: int, upstream_ca: bytes
) -> None:
    """The proxy's files (its own user's alone) and, when it intercepts, the job CA that
    setup trusts (`trust`, world-readable: it holds no secret)."""
    files = {"onloop_egress.py": PLUGIN.read_bytes()}
    files["policy.json"] = json.dumps(policy.document()).encode()
    if policy.intercept:
        tls = make_job_tls(policy.intercepted_hosts(), job_id)
        files |= tls.proxy_files(upstream_ca)
        trust.mkdir()
        for name, data in tls.trust_files(upstream_ca).items():
            (trust / name).write_bytes(data)
            (trust / name).chmod(0o644)  # whatever the worker's umask: setup reads them
        trust.chmod(0o755)
    uid = proxy_uid()
    conf.mkdir(mode=0o700)
    paths = [conf]
    for rel, data in files.items():
        path = conf / rel
        if path.parent not in paths:
            path.parent.mkdir(mode=0o700)
            paths.append(path.parent)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
        paths.append(path)
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, uid, uid)


def start_proxy(
    client: docker.DockerClient,
    image: str,
    name: str,
    labels: dict[str, str],
    conf: Path,
    network: Any,
    egress: str,
    extra: Sequence[str] = (),
    *,
    ready_timeout: float,
) -> Container:
    """A running proxy on the job's `network` and the shared `egress` one, ready to serve."""
    uid = proxy_uid()
    flags = ["--hostname", "0.0.0.0", "--port", str(PROXY_PORT), "--num-acceptors", "1"]  # noqa: S104
    flags += ["--num-workers", "2", "--timeout", "120", "--log-level", "WARNING"]
    flags += ["--plugins", "onloop_egress.EgressPolicyPlugin", *extra]
    try:
        container = client.containers.create(
            image=image,
            entrypoint=["/opt/tools/bin/python3", "-m", "onloop_egress"],
            command=flags,
            name=name,
            labels=labels,
            user=f"{uid}:{uid}",
            environment={"HOME": "/tmp", "PYTHONPATH": CONF},  # noqa: S108
            network=str(network.name),
            read_only=True,
            tmpfs={"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"},  # noqa: S108
            mounts=[Mount(CONF, str(conf), type="bind", read_only=True)],
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            init=True,
            pids_limit=128,
            mem_limit="512m",
            hostname="onloop-proxy",
        )
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"egress proxy image {image!r} not found") from exc
    try:
        client.networks.get(egress).connect(container)
        container.start()
        wait_ready(container, ready_timeout)
    except Exception:
        remove_container(client, container.id or "")
        raise
    return container


def wait_ready(container: Container, timeout: float) -> None:
    """Return once the proxy says it listens; SandboxError if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        if READY_MARK in logs:
            return
        container.reload()
        if container.status not in ("created", "running"):
            raise SandboxError(f"the egress proxy exited: {logs[-2000:]}")
        time.sleep(0.05)
    raise SandboxError(f"the egress proxy did not start in {timeout:g}s")


def proxy_ip(container: Container, network: str) -> str:
    """The proxy's address on the job's `network`."""
    container.reload()
    nets = container.attrs["NetworkSettings"]["Networks"]
    ip = str((nets.get(network) or {}).get("IPAddress") or "")
    if not ip:
        raise SandboxError(f"the egress proxy has no address on {network}")
    return ip
