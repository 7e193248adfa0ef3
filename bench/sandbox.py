"""Sandbox start-up bench: trigger to first command, warm path against the naive one.

Prints, in one run: (a) a job on a ~100 MB repository with a warm mirror and pool against a
fresh `git clone` over HTTP + `docker run`; (b) a second job with the same dependency hash
against the first (setup skipped); (c) `docker run --rm IMAGE true`, the floor.
Usage: python bench/sandbox.py [--runs N] [--mb SIZE]   (needs dockerd and the image)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from tasks.git.process import git
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import Limits
from tasks.sandbox.docker_backend import DockerBackend
from tasks.sandbox.job import job_sandbox
from tasks.sandbox.pool import WarmPool
from tasks.sandbox.snapshots import SnapshotStore
from tests.doubles.git_server import GitServer

IMAGE = os.environ.get("ONLOOP_SANDBOX_IMAGE", "onloop-sandbox:latest")
FIRST = ["git", "-c", "safe.directory=*", "rev-parse", "HEAD"]


def job_id() -> int:
    """A job id no database holds, so no worker's reaper keeps this run's sandboxes."""
    return random.randrange(10**9, 2 * 10**9)


def make_big_repo(bare: Path, mb: int) -> None:
    """A repository of about `mb` MB: 2,000 source files and a history of binary churn."""
    rng = open("/dev/urandom", "rb")
    lines: list[bytes] = []

    def blob(data: bytes) -> None:
        lines.append(b"data %d\n" % len(data) + data + b"\n")

    def commit(n: int, files: dict[str, bytes]) -> None:
        lines.append(b"commit refs/heads/main\n")
        lines.append(b"committer Bench <b@e> %d +0000\n" % (1_700_000_000 + n))
        blob(f"commit {n}".encode())
        for name, data in files.items():
            lines.append(f"M 100644 inline {name}\n".encode())
            blob(data)

    src = {f"src/pkg{i % 40}/mod{i}.py": f"VALUE_{i} = {i}\n".encode() * 60 for i in range(2000)}
    src["pyproject.toml"] = b"[project]\nname = 'bench'\nversion = '0.1'\n"
    src["bench_pkg.py"] = b"X = 1\n"
    commit(0, src)
    chunk = 2 * 1024 * 1024
    for n in range(1, max(1, mb * 1024 * 1024 // chunk) + 1):
        commit(n, {f"assets/blob{n % 4}.bin": rng.read(chunk)})
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(
        ["git", "-C", str(bare), "fast-import", "--quiet"], input=b"".join(lines), check=True
    )
    subprocess.run(["git", "-C", str(bare), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    subprocess.run(["git", "-C", str(bare), "repack", "-adq"], check=True)


def du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def timed(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        begun = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begun)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=100)
    args = ap.parse_args()
    client = docker.from_env(timeout=300)
    client.images.get(IMAGE)
    tmp = Path(tempfile.mkdtemp(prefix="onloop-bench-", dir="/var/tmp"))
    token = "ghs_" + uuid.uuid4().hex
    made_snapshots: list[str] = []
    try:
        served = tmp / "served"
        make_big_repo(served / "o" / "big.git", args.mb)
        print(f"repository: {du_mb(served / 'o' / 'big.git'):.0f} MB packed")
        with GitServer(served, token) as server:
            url = server.url("o/big")
            sha = git(["rev-parse", "main"], served / "o" / "big.git").stdout.strip()
            backend = DockerBackend(client)
            limits = Limits()
            cache = RepoCache(tmp / "cache")
            cache.ensure("o/big", url, token, sha=sha)  # the warm mirror
            pool = WarmPool(backend, IMAGE, tmp / "pool", limits, size=1)
            common: dict[str, Any] = {
                "repo": "o/big",
                "clone_url": url,
                "rev": sha,
                "image": IMAGE,
                "workspace_root": tmp / "jobs",
                "token": token,
                "limits": limits,
            }

            def warm_job(primed: bool) -> float:
                pool.max_primed = 2 if primed else 0
                pool.settle()  # the pool refills (and primes) between jobs, in the background
                pool.fill()
                begun = time.perf_counter()
                with job_sandbox(backend, cache, job_id=job_id(), pool=pool, **common) as job:
                    assert job.pooled and job.sandbox.exec(FIRST).stdout.strip() == sha
                    return time.perf_counter() - begun

            def naive_job() -> None:
                ws = tmp / f"naive-{uuid.uuid4().hex[:6]}"
                git(["clone", "--quiet", url, str(ws)], token=token)
                out = subprocess.run(
                    [
                        "docker",
                        "run",
                        "--rm",
                        "--network",
                        "none",
                        "-v",
                        f"{ws}:/workspace",
                        "-w",
                        "/workspace",
                        IMAGE,
                        *FIRST,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                assert out.strip() == sha
                shutil.rmtree(ws)

            blank = statistics.median(warm_job(False) for _ in range(args.runs))
            warm_job(True)  # leaves a slot primed with this repository
            warm = statistics.median(warm_job(True) for _ in range(args.runs))
            naive = timed(naive_job, args.runs)

            store = SnapshotStore(client, tmp / "snapshots")
            nonce = uuid.uuid4().hex[:8]
            setup = f"pip install --quiet --no-index --no-build-isolation -e . # {nonce}"

            def setup_job() -> tuple[float, bool]:
                pool.settle()
                begun = time.perf_counter()
                with job_sandbox(
                    backend,
                    cache,
                    job_id=job_id(),
                    setup=setup,
                    snapshots=store,
                    pool=pool,
                    **common,
                ) as job:
                    assert job.sandbox.exec(["python", "-c", "import bench_pkg"]).ok
                    if job.snapshot:
                        made_snapshots.append(job.snapshot)
                    return time.perf_counter() - begun, job.setup is not None

            first, ran = setup_job()
            assert ran
            again = [setup_job() for _ in range(args.runs)]
            assert not any(r for _, r in again)
            second = statistics.median(t for t, _ in again)
            pool.close()

        floor = timed(
            lambda: subprocess.run(["docker", "run", "--rm", IMAGE, "true"], check=True),
            args.runs,
        )
        print(f"(a) warm job, trigger to first command: {warm:.3f} s  (pool slot primed)")
        print(f"    same, blank pool slot + checkout:    {blank:.3f} s")
        print(f"    fresh git clone + docker run:        {naive:.3f} s")
        print(f"    ratio naive / warm:                  {naive / warm:.1f}x  (target >= 10x)")
        print(f"    ratio naive / blank slot:            {naive / blank:.1f}x")
        print(f"(b) first job with setup + snapshot:     {first:.3f} s")
        print(f"    second job, same dependency hash:    {second:.3f} s  (setup skipped)")
        print(f"    ratio first / second:                {first / second:.1f}x")
        print(f"(c) docker run --rm {IMAGE} true:  {floor:.3f} s")
        print(f"    ratio warm / floor:                  {warm / floor:.2f}x")
        print(f"    ratio snapshot job / floor:          {second / floor:.2f}x")
    finally:
        for ref in made_snapshots:
            try:
                client.images.remove(ref)
            except docker.errors.APIError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
