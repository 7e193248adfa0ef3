"""Setup's network: a job's own internal Docker network whose only way out is an allowlisting
proxy (proxy.py with tasks/sandbox/egress/plugin.py), plus the worker's download cache."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import Mount

from app.policy.egress import EgressEntry
from tasks.sandbox.base import SandboxError
from tasks.sandbox.docker_backend import HOST_LABEL, JOB_LABEL, remove_container
from tasks.sandbox.egress.policy import (
    CACHE_MOUNT,
    TRUST_MOUNT,
    EgressPolicy,
    Refusal,
    load_credentials,
    parse_refusals,
    refusal_message,
)
from tasks.sandbox.egress.tls import make_job_tls, proxy_flags
from tasks.sandbox.trust import HeadTrust

__all__ = [
    "CACHE_MOUNT",
    "EgressGateway",
    "EgressPolicy",
    "EgressSession",
    "Refusal",
    "load_credentials",
    "parse_refusals",
    "refusal_message",
    "remove_network",
]

log = logging.getLogger(__name__)

PROXY_PORT = 3128
EGRESS_NETWORK = "onloop-egress"  # shared by every job's proxy; containers on it cannot meet
EGRESS_LABEL = "onloop.egress"
PROXY_IMAGE = "onloop-sandbox:latest"  # has proxy.py in /opt/tools (config/sandbox/tools.txt)
PLUGIN = Path(__file__).with_name("plugin.py")
READY_MARK = "onloop-egress-ready"
PROXY_UID = 65532  # the proxy's own user when the worker is root
CONF = "/opt/onloop-egress"  # the proxy's plugin, policy and TLS material (read-only)
_ICC = "com.docker.network.bridge.enable_icc"
# No address of the host on the job's bridge: with it, an `internal` network still reaches
# every service the host listens on (https://github.com/moby/libnetwork/issues/1151).
_NO_HOST = {"com.docker.network.bridge.inhibit_ipv4": "true"}


@dataclass
class EgressSession:
    """One job's setup network while it exists: start setup on `network` with `mounts` and
    run it with `env`."""

    network: str
    proxy: Container
    proxy_url: str
    env: dict[str, str]
    mounts: list[Mount]

    def refused(self) -> list[Refusal]:
        """Every connection the proxy refused so far, first one first."""
        try:
            logs = self.proxy.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        except docker.errors.APIError:
            log.warning("could not read the egress proxy's log", exc_info=True)
            return []
        return parse_refusals(logs)


class EgressGateway:
    """A worker's setup networking: the shared egress network, one proxy and internal network
    per job's setup, and the download cache every setup of this worker shares."""

    def __init__(
        self,
        client: docker.DockerClient,
        state_dir: Path,
        *,
        proxy_image: str = PROXY_IMAGE,
        cache_dir: Path | None = None,
        credentials: Mapping[str, str] | None = None,
        upstream_ca: bytes = b"",
        ready_timeout: float = 30.0,
    ) -> None:
        self.client = client
        self.state_dir = state_dir
        self.proxy_image = proxy_image
        self.cache_dir = cache_dir
        self.credentials = dict(credentials or {})
        # CAs the proxy trusts for intercepted indexes besides the public ones (a company CA)
        self.upstream_ca = upstream_ca
        self.ready_timeout = ready_timeout
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for stale in [*state_dir.glob("proxy-*"), *state_dir.glob("trust-*")]:  # a dead worker's
            if stale.stat().st_mtime < time.time() - 86400:
                shutil.rmtree(stale, ignore_errors=True)

    def policy(
        self,
        entries: Sequence[EgressEntry],
        cache_scope: str = "",
        *,
        private: Sequence[str] = (),
        trust: HeadTrust = HeadTrust.TRUSTED,
    ) -> EgressPolicy:
        """The policy for a job's (narrowed) egress list, with this worker's credentials, the
        operator's `private` indexes and the download cache of `cache_scope` (one per
        installation, say). An untrusted head gets none of the three: public hosts only."""
        scope = re.sub(r"[^A-Za-z0-9_.-]", "_", cache_scope)
        if trust is not HeadTrust.TRUSTED:
            policy = EgressPolicy.from_entries(entries)
            return dataclasses.replace(policy, cache_scope=scope, shared_cache=False)
        policy = EgressPolicy.from_entries(entries, self.credentials, private)
        return dataclasses.replace(policy, cache_scope=scope)

    def egress_network(self) -> str:
        """The shared network with a way out, made on first use with inter-container traffic
        off, so one job's proxy cannot reach another's."""
        with self._lock:
            for _ in range(2):
                found = [n for n in self.client.networks.list(names=[EGRESS_NETWORK])]
                found = [n for n in found if n.name == EGRESS_NETWORK]
                if found:
                    options = found[0].attrs.get("Options") or {}
                    if options.get(_ICC) != "false" or found[0].attrs.get("Internal"):
                        raise SandboxError(
                            f"Docker network {EGRESS_NETWORK} lets containers reach each other"
                            f" (or has no way out): remove it, onloop makes it anew"
                        )
                    return EGRESS_NETWORK
                try:
                    self.client.networks.create(
                        EGRESS_NETWORK,
                        driver="bridge",
                        options={_ICC: "false"},
                        labels={EGRESS_LABEL: "1"},
                        check_duplicate=True,
                    )
                except docker.errors.APIError as exc:  # made meanwhile by another worker
                    log.info("egress network not created: %s", exc)
            raise SandboxError(f"could not make the Docker network {EGRESS_NETWORK}")

    @contextlib.contextmanager
    def session(
        self, job_id: int, policy: EgressPolicy, uid: int, gid: int
    ) -> Iterator[EgressSession]:
        """A job network and its proxy for one setup; both removed afterwards, always.
        `uid:gid` is who runs setup (it gets the download cache)."""
        labels = {JOB_LABEL: str(job_id), HOST_LABEL: self.host}
        suffix = f"{job_id}--{secrets.token_hex(3)}"
        egress = self.egress_network()
        conf = Path(self.state_dir) / f"proxy-{suffix}"
        trust = Path(self.state_dir) / f"trust-{suffix}"
        network: Any = None
        proxy: Container | None = None
        try:
            network = self.client.networks.create(
                f"onloop-net-{suffix}",
                driver="bridge",
                internal=True,
                options=_NO_HOST,
                labels=labels,
                check_duplicate=True,
            )
            self._write_conf(conf, policy, trust, job_id)
            flags = proxy_flags(CONF) if policy.intercept else []
            name = f"onloop-proxy-{suffix}"
            proxy = self._start_proxy(name, labels, conf, network, egress, flags)
            ip = self._ip(proxy, str(network.name))
            url = f"http://{ip}:{PROXY_PORT}"
            mounts = self._cache_mounts(uid, gid, policy.cache_scope) if policy.shared_cache else []
            env = policy.env(url, cache=bool(mounts))
            if policy.intercept:
                mounts.append(Mount(TRUST_MOUNT, str(trust.resolve()), type="bind", read_only=True))
            yield EgressSession(str(network.name), proxy, url, env, mounts)
        finally:
            if proxy is not None:
                remove_container(self.client, proxy.id or "")
            if network is not None:
                remove_network(self.client, str(network.id))
            shutil.rmtree(conf, ignore_errors=True)
            shutil.rmtree(trust, ignore_errors=True)

    def _write_conf(self, conf: Path, policy: EgressPolicy, trust: Path, job_id: int) -> None:
        """The proxy's files (its own user's alone) and, when it intercepts, the job CA that
        setup trusts (`trust`, world-readable: it holds no secret)."""
        files = {"onloop_egress.py": PLUGIN.read_bytes()}
        files["policy.json"] = json.dumps(policy.document()).encode()
        if policy.intercept:
            tls = make_job_tls(policy.intercepted_hosts(), job_id)
            files |= tls.proxy_files(self.upstream_ca)
            trust.mkdir()
            for name, data in tls.trust_files(self.upstream_ca).items():
                (trust / name).write_bytes(data)
                (trust / name).chmod(0o644)  # whatever the worker's umask: setup reads them
            trust.chmod(0o755)
        uid = self._proxy_uid()
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

    def _proxy_uid(self) -> int:
        return PROXY_UID if os.geteuid() == 0 else os.geteuid()

    def _start_proxy(
        self,
        name: str,
        labels: dict[str, str],
        conf: Path,
        network: Any,
        egress: str,
        extra: Sequence[str] = (),
    ) -> Container:
        uid = self._proxy_uid()
        flags = ["--hostname", "0.0.0.0", "--port", str(PROXY_PORT), "--num-acceptors", "1"]  # noqa: S104
        flags += ["--num-workers", "2", "--timeout", "120", "--log-level", "WARNING"]
        flags += ["--plugins", "onloop_egress.EgressPolicyPlugin", *extra]
        try:
            container = self.client.containers.create(
                image=self.proxy_image,
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
            raise SandboxError(f"egress proxy image {self.proxy_image!r} not found") from exc
        try:
            self.client.networks.get(egress).connect(container)
            container.start()
            self._wait_ready(container)
        except Exception:
            remove_container(self.client, container.id or "")
            raise
        return container

    def _wait_ready(self, container: Container) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            logs = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            if READY_MARK in logs:
                return
            container.reload()
            if container.status not in ("created", "running"):
                raise SandboxError(f"the egress proxy exited: {logs[-2000:]}")
            time.sleep(0.05)
        raise SandboxError(f"the egress proxy did not start in {self.ready_timeout:g}s")

    def _ip(self, container: Container, network: str) -> str:
        container.reload()
        nets = container.attrs["NetworkSettings"]["Networks"]
        ip = str((nets.get(network) or {}).get("IPAddress") or "")
        if not ip:
            raise SandboxError(f"the egress proxy has no address on {network}")
        return ip

    def _cache_mounts(self, uid: int, gid: int, scope: str = "") -> list[Mount]:
        if self.cache_dir is None:
            return []
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        cache = self.cache_dir / scope if scope else self.cache_dir
        for path in (cache, cache / "pip", cache / "npm"):
            path.mkdir(exist_ok=True, mode=0o700)
            if os.geteuid() == 0 and os.stat(path).st_uid != uid:
                os.chown(path, uid, gid)
        return [Mount(CACHE_MOUNT, str(cache.resolve()), type="bind")]


def remove_network(client: docker.DockerClient, network_id: str) -> bool:
    """Remove a job network, disconnecting whatever is still attached; True if it was there."""
    try:
        network = client.networks.get(network_id)
    except docker.errors.NotFound:
        return False
    for attempt in range(3):
        try:
            network.reload()
            for cid in (network.attrs.get("Containers") or {}).keys():
                with contextlib.suppress(docker.errors.APIError):
                    network.disconnect(cid, force=True)
            network.remove()
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    return False
