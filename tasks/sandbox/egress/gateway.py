"""Setup's network: a job's own internal Docker network whose only way out is an allowlisting
proxy (proxy.py with tasks/sandbox/egress/plugin.py), plus the worker's download cache."""

from __future__ import annotations

import contextlib
import dataclasses
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
from tasks.sandbox.docker_backend import (
    DEPLOYMENT_LABEL,
    HOST_LABEL,
    JOB_LABEL,
    remove_container,
)
from tasks.sandbox.egress.fitness import CheckedImages
from tasks.sandbox.egress.policy import (
    CACHE_MOUNT,
    TRUST_MOUNT,
    EgressPolicy,
    Refusal,
    load_credentials,
    parse_refusals,
    refusal_message,
)
from tasks.sandbox.egress.proxy import (
    CONF,
    PLUGIN,
    PROXY_IMAGE,
    PROXY_PORT,
    proxy_ip,
    start_proxy,
    write_conf,
)
from tasks.sandbox.egress.tls import proxy_flags
from tasks.sandbox.trust import HeadTrust

__all__ = [
    "CACHE_MOUNT",
    "PLUGIN",
    "PROXY_PORT",
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

EGRESS_NETWORK = "onloop-egress"  # shared by every job's proxy; containers on it cannot meet
EGRESS_LABEL = "onloop.egress"
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
        deployment: str = "",
    ) -> None:
        self.client = client
        self.deployment = deployment
        self.state_dir = state_dir
        self.proxy_image = proxy_image
        self.cache_dir = cache_dir
        self.credentials = dict(credentials or {})
        # CAs the proxy trusts for intercepted indexes besides the public ones (a company CA)
        self.upstream_ca = upstream_ca
        self.ready_timeout = ready_timeout
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self._checked = CheckedImages()
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
        `uid:gid` is who runs setup (it gets the download cache). ImageUnfit first when the
        proxy's image lacks its tools (not built by `onloop sandbox build-image`)."""
        self._checked.require(self.client, self.proxy_image)
        labels = {JOB_LABEL: str(job_id), HOST_LABEL: self.host}
        if self.deployment:
            labels[DEPLOYMENT_LABEL] = self.deployment
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
            write_conf(conf, policy, trust, job_id, self.upstream_ca)
            flags = proxy_flags(CONF) if policy.intercept else []
            name = f"onloop-proxy-{suffix}"
            proxy = start_proxy(
                self.client,
                self.proxy_image,
                name,
                labels,
                conf,
                network,
                egress,
                flags,
                ready_timeout=self.ready_timeout,
            )
            ip = proxy_ip(proxy, str(network.name))
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
