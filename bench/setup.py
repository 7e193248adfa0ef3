"""Setup bench: a repository's `sandbox.setup` cold, with a warm download cache, and from its
dependency snapshot, through the egress proxy, as ratios to the cold time; and cold from an
HTTPS private index whose TLS the proxy opens to add its credentials.

The packages come from a local index on this machine (the proxies' network gateway) that
sends wheels at --rate MB/s, standing in for a registry across the internet; nothing leaves
the machine. Times are trigger to first command (proxy and network, setup, snapshot commit,
sandbox start), plus the setup command's own time.
Usage: python bench/setup.py [--wheels N] [--mb SIZE] [--rate MB_PER_S]  (needs dockerd, image)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker
import docker.errors

from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits
from tasks.sandbox.docker_backend import DockerBackend, exec_ids
from tasks.sandbox.egress.gateway import EgressGateway, load_credentials
from tasks.sandbox.egress.tls import make_job_tls
from tasks.sandbox.job import job_sandbox
from tasks.sandbox.snapshots import SnapshotStore
from tests.doubles.git_server import GitServer, make_repo
from tests.doubles.package_index import PackageIndex

IMAGE = os.environ.get("ONLOOP_SANDBOX_IMAGE", "onloop-sandbox:latest")


def job_id() -> int:
    """A job id no database holds, so no worker's reaper keeps this run's sandboxes."""
    return random.randrange(10**9, 2 * 10**9)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--wheels", type=int, default=6, help="packages the setup installs")
    ap.add_argument("--mb", type=float, default=4.0, help="size of each wheel, MB")
    ap.add_argument("--rate", type=float, default=8.0, help="index bandwidth, MB/s")
    args = ap.parse_args()
    client = docker.from_env(timeout=300)
    client.images.get(IMAGE)
    tmp = Path(tempfile.mkdtemp(prefix="onloop-bench-setup-", dir="/var/tmp"))
    token = "ghs_" + uuid.uuid4().hex
    made: list[str] = []
    try:
        gateway = EgressGateway(
            client, tmp / "egress", proxy_image=IMAGE, cache_dir=tmp / "download-cache"
        )
        egress = client.networks.get(gateway.egress_network())
        host = str(egress.attrs["IPAM"]["Config"][0]["Gateway"])
        company = make_job_tls([host])  # the private index's own CA
        (tmp / "index.pem").write_bytes(company.certs[host])
        (tmp / "index.key").write_bytes(company.key_pem)
        served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        served.load_cert_chain(tmp / "index.pem", tmp / "index.key")
        gateway.upstream_ca = company.ca_pem
        rate = args.rate * 2**20
        with (
            PackageIndex(host, rate=rate) as index,
            PackageIndex(host, rate=rate, auth="bench:pw", tls=served) as private,
            GitServer(tmp / "served", token) as server,
        ):
            names = [f"bench-dep-{n}" for n in range(args.wheels)]
            for name in names:
                index.add(name, padding=int(args.mb * 2**20))
                private.add(name, padding=int(args.mb * 2**20))
            requirements = "".join(f"{name}\n" for name in names)
            shas = {
                repo: make_repo(tmp / "served" / f"{repo}.git", {"requirements.txt": requirements})
                for repo in ("o/first", "o/second", "o/private")
            }
            gateway.credentials = load_credentials(
                f"{private.url}: {{username: bench, password: pw}}"
            )
            backend = DockerBackend(client)
            limits = Limits(command_timeout=900)
            store = SnapshotStore(client, tmp / "snapshots")
            cache = RepoCache(tmp / "mirrors")
            nonce = uuid.uuid4().hex[:8]  # no snapshot of an earlier run is reused
            common: dict[str, Any] = {
                "image": IMAGE,
                "token": token,
                "setup": f"pip install --quiet -r requirements.txt  # {nonce}",
                "snapshots": store,
                "workspace_root": tmp / "jobs",
                "limits": limits,
                "gateway": gateway,
                "egress": gateway.policy([f"{index.url}/simple/"], private=[host]),
            }
            for repo, sha in shas.items():  # mirrors fetched, so only setup differs
                cache.ensure(repo, server.url(repo), token, sha=sha)
            with gateway.session(job_id(), common["egress"], *exec_ids(limits)):
                pass

            def job(repo: str, **over: Any) -> tuple[float, float | None]:
                begun = time.perf_counter()
                with job_sandbox(
                    backend,
                    cache,
                    job_id=job_id(),
                    repo=repo,
                    clone_url=server.url(repo),
                    rev=shas[repo],
                    **(common | over),
                ) as js:
                    took = time.perf_counter() - begun
                    assert js.sandbox.exec(["python", "-c", "import bench_dep_0"]).ok
                    if js.snapshot and js.setup is not None:
                        made.append(js.snapshot)
                    return took, js.setup.duration if js.setup else None

            cold, cold_setup = job("o/first")  # empty download cache, no snapshot
            fetched = len(index.requests)
            warm, warm_setup = job("o/second")  # same wheels, other repository
            refetched = sum(1 for p, _ in index.requests[fetched:] if p.startswith("/files/"))
            snap, snap_setup = job("o/first")  # same dependency hash: its snapshot
            assert snap_setup is None
            intercepted = gateway.policy([f"{private.url}/simple/"], private=[host])
            assert intercepted.intercept
            tls, tls_setup = job("o/private", egress=intercepted)  # cold, other index
            assert private.requests and all(a for _, a in private.requests)

        total = args.wheels * args.mb
        rows = [
            ("cold (no cache, no snapshot)", cold, f"setup cmd {cold_setup:.2f} s"),
            (
                "warm download cache",
                warm,
                f"setup cmd {warm_setup:.2f} s, {refetched} wheels fetched again",
            ),
            ("dependency snapshot", snap, "setup skipped"),
            (
                "cold, HTTPS private index",
                tls,
                f"setup cmd {tls_setup:.2f} s, TLS opened by the proxy to add credentials",
            ),
        ]
        print(f"setup: pip install {args.wheels} wheels x {args.mb:g} MB ({total:g} MB) from an")
        print(f"index sending {args.rate:g} MB/s, through the job's egress proxy")
        for label, took, note in rows:
            print(f"  {label + ':':32} {took:7.2f} s  {took / cold:5.2f} x cold  ({note})")
    finally:
        for ref in made:
            try:
                client.images.remove(ref)
            except docker.errors.APIError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
