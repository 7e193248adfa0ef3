"""Cost against size: `/agent rebase` on repositories of about 10 MB, 200 MB and 1 GB.

For each size (bench/size_repos.py builds them with `git fast-import`, cached under
var/bench-repos) a fresh world of bench/e2e.py (the app, a real `onloop worker`, Docker,
Redis and the GitHub double serving the repository over smart HTTP) runs one rebase with
a cold mirror, then one with the mirror warm, each measured from the webhook to the first
command in a sandbox (Docker's exec_start event) and to the push. The floor is plain git
doing the same work in the same run: a full clone, rebase and push (cold), then fetch,
rebase and push in that clone (warm). Printed as ratios to the floor and to the smallest
size. `--mode full`: every job checks a fresh workspace out of the mirror (no warm pool);
`--mode primed`: the warm pool (the worker's default, one blank slot) primes a workspace
for the repository after each job, which the next job only moves.
Usage: python bench/size.py [--sizes 10,200,1000] [--mode full,primed] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store.deployment import deployment_id
from bench.e2e import Bench, BenchWorld, bench_world
from bench.e2e_floor import REPO, Floor
from bench.size_repos import build, pack_mb, tree_stats
from tasks.sandbox.docker_spec import DEPLOYMENT_LABEL, JOB_LABEL
from tests.doubles.worker_proc import wait_until

MODES = {"full": 0, "primed": 1}  # warm pool size


@dataclass
class Run:
    first: float  # webhook → first sandbox command
    result: float  # webhook → push
    floor: float  # plain git doing the same
    steps: str = ""  # the job's steps and their seconds
    primed: bool = False  # the job took a primed workspace


class Execs:
    """Wall-clock times of `docker exec` starts in onloop sandboxes, from Docker's events."""

    def __init__(self, deployment: str) -> None:
        self.client = docker.APIClient()
        self.times: list[float] = []
        # Only this world's: other onloops on the same Docker daemon run sandboxes too.
        self.label = f"{DEPLOYMENT_LABEL}={deployment}"
        self.stream = self.client.events(
            decode=True,
            filters={
                "type": "container",
                "event": "exec_start",
                "label": self.label,
            },
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if JOB_LABEL in (event.get("Actor") or {}).get("Attributes", {}):
                    self.times.append(event["timeNano"] / 1e9)
        except Exception:  # closed at the end
            return

    def first_after(self, since: float) -> float:
        wait_until(lambda: any(t >= since for t in self.times), 60, "a sandbox command")
        return min(t for t in self.times if t >= since)

    def close(self) -> None:
        """Stop reading, and remove what the world left (a warm pool's idle container)."""
        self.stream.close()
        for box in self.client.containers(all=True, filters={"label": self.label}):
            self.client.remove_container(box["Id"], force=True)
        self.client.close()


class Plain:
    """The floor: the person's own git against the double, in its own clone."""

    def __init__(self, bench: Bench, root: Path) -> None:
        self.floor = bench.floor
        self.clone = root / "plain"

    def rebase(self, branch: str, cold: bool) -> float:
        git = self.floor.git
        begun = time.perf_counter()
        if cold:
            git(["clone", "-q", self.floor.url, str(self.clone)])
        else:
            git(["fetch", "-q", "origin"], self.clone)
        git(["checkout", "-q", "-B", branch, f"origin/{branch}"], self.clone)
        git(["rebase", "-q", "origin/main"], self.clone)
        git(["push", "-q", "--force-with-lease", "origin", branch], self.clone)
        return time.perf_counter() - begun


def serve(world: BenchWorld, source: Path) -> None:
    """Put the synthetic repository in place of the double's octo/widgets."""
    git_dir = world.double.git_dir(REPO)
    shutil.rmtree(git_dir)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(git_dir)], check=True)
    for key, value in (("http.receivepack", "true"), ("uploadpack.allowAnySHA1InWant", "true")):
        subprocess.run(["git", f"--git-dir={git_dir}", "config", key, value], check=True)


def primed(world: BenchWorld) -> list[Path]:
    """The warm pool's workspaces that hold a checkout (made and handed to the sandbox uid)."""
    slots = (world.root / "work" / "pool").glob("slot-*")
    return [s for s in slots if (s / ".git" / "index").exists() and s.stat().st_uid != 0]


def one(bench: Bench, plain: Plain, execs: Execs, cold: bool) -> Run:
    branch, number = bench.pull("rb", {f"rb{bench.n}.py": "X = 1\n"})
    floor_branch = bench.branch("rbf", {f"rbf{bench.n}.py": "X = 1\n"})
    bench.move_main()
    mark, wall, begun = len(bench.double.pushes), time.time(), time.perf_counter()
    job_id = bench.world.comment("/agent rebase", "alice", number)
    pushed = bench.seen(lambda: bench.pushed(branch, mark), f"the rebase of {branch}", job_id)
    first = execs.first_after(wall) - wall
    steps = bench.world.wait(job_id).steps or []
    shown = " ".join(f"{s['name']} {float(s.get('duration') or 0):.2f}" for s in steps)
    return Run(first, pushed - begun, plain.rebase(floor_branch, cold), shown)


def measure(mb: int, mode: str, cache: Path) -> tuple[Run, Run]:
    source = build(cache, mb)
    root = Path(tempfile.mkdtemp(prefix=f"onloop-size-{mb}-", dir="/var/tmp"))
    execs: Execs | None = None
    try:
        with bench_world(root, None, 4, MODES[mode]) as world:
            execs = Execs(deployment_id(world.db))
            bench = Bench(world, Floor(world.double, root))  # its warm clone: the tiny repo
            serve(world, source)
            wait_until(lambda: "ready." in world.worker.output(), 120, "the worker")
            plain = Plain(bench, root)
            cold = one(bench, plain, execs, cold=True)
            if MODES[mode]:
                wait_until(lambda: primed(world), 600, "a primed workspace")
                time.sleep(2)  # registered with the pool right after the hand-over
            ready = primed(world)
            warm = one(bench, plain, execs, cold=False)
            warm.primed = bool(ready) and not all(s.exists() for s in ready)
    finally:
        if execs is not None:
            execs.close()
        shutil.rmtree(root, ignore_errors=True)
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="10,200,1000", help="repository sizes in MB")
    ap.add_argument("--mode", default="full,primed", help="full and/or primed (see above)")
    ap.add_argument("--cache", type=Path, default=Path(__file__).resolve().parents[1] / "var")
    args = ap.parse_args()
    cache = args.cache / "bench-repos"
    cache.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, {os.cpu_count()} cores, load average {load}, {version.strip()}")
    for mb in sizes:
        made = build(cache, mb)
        files, tree = tree_stats(made)
        print(
            f"{mb} MB repository: objects {pack_mb(made):.0f} MB, main has {files} files, "
            f"{tree:.0f} MB",
            flush=True,
        )
    for mode in [m for m in args.mode.split(",") if m]:
        runs = {mb: measure(mb, mode, cache) for mb in sizes}
        base = runs[sizes[0]]
        print(f"mode {mode}:")
        print(
            "  size   mirror  first cmd  result  floor  result/floor  first/first@small  "
            "result/result@small"
        )
        for mb, pair in runs.items():
            for state, run, small in (("cold", pair[0], base[0]), ("warm", pair[1], base[1])):
                print(
                    f"  {mb:>5}  {state:>6}  {run.first:8.2f}s {run.result:6.2f}s "
                    f"{run.floor:5.2f}s {run.result / run.floor:11.1f}x "
                    f"{run.first / small.first:17.1f}x {run.result / small.result:19.1f}x",
                    flush=True,
                )
                took = ", primed workspace" if run.primed else ""
                print(f"                steps (s): {run.steps}{took}")


if __name__ == "__main__":
    main()
