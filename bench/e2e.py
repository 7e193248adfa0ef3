"""End-to-end bench: webhook to visible result per job kind, as a ratio to its floor.

On the GitHub double with Docker, git, the Flask app and a real `onloop worker` (as
tests/e2e/world.py wires them, with the production defaults for the dispatcher, the lease
and the caps), measured in one run: (a) `/agent rebase` to the push, (b) a
ruff failure (workflow_run failure → fix_ci) to the fix push, (c) `agent:fix` with the
scripted command agent to the pull request, (d) `/agent review` to the review; each against
its floor, the same git and tool commands run directly (bench/e2e_floor.py), with the job's
steps; a rebase also against that floor with its rebase in a sandbox (bench/e2e_sandboxed.py).
`--concurrency`: N rebase jobs from N PRs at once on one worker, against one by one.
Also the resident memory of an idle web worker, an idle Celery worker and a sandbox at rest.
The warm pool is on, as in `onloop worker` (ONLOOP_SANDBOX_POOL_SIZE, default 1): a job takes
a container started ahead, primed with a checkout of its repository (`--pool-size 0`: off).
Each floor, and each job, starts once the worker's sandboxes are still (the last job's
removal and the pool's refill done), so that neither shares the machine with that work.
Usage: python bench/e2e.py [--runs N] [--concurrency] [--prs N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker

from app.core.settings import Settings
from app.store import migrate
from app.store.db import Database
from app.store.models import TERMINAL_STATES, JobState
from app.web import create_app
from bench.e2e_floor import REPO, Floor, memory, sandbox_at_rest_mb, web_memory
from bench.e2e_sandboxed import SandboxedRebase
from tasks.sandbox.docker_backend import JOB_LABEL
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.actions import add_run
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import issue_labeled, workflow_run_failed
from tests.doubles.redis_server import RedisServer
from tests.doubles.worker_proc import WorkerProcess, wait_until
from tests.e2e.world import World, remove_snapshots

AGENT = "if grep -q 'says teh' TASK.md; then sed -i 's/teh/the/' README.md; fi"
PYPROJECT = '[project]\nname = "widgets"\nversion = "0"\n\n[tool.ruff]\nline-length = 100\n'
BASE = '"""Widgets."""\n\n\ndef count() -> int:\n    return 1\n'
BAD = "import os\nimport sys\n\n\ndef main( ):\n    return sys.argv\n"
SPIN = BASE + "\n\ndef spin(n):\n    items=[n,n+1]\n    return undefined_thing+items\n"
RUFF_LOG = (
    "2026-12-01T10:00:01.0000000Z bad.py:1:8: F401 [*] `os` imported but unused\n"
    "2026-12-01T10:00:01.1000000Z ##[error]Process completed with exit code 1.\n"
)
KINDS = ("rebase_pr", "fix_ci", "fix_issue", "review_pr")
VISIBLE = {"rebase_pr": "push", "fix_ci": "push", "fix_issue": "pr", "review_pr": "review"}


@dataclass
class Sample:
    """One job: seconds from the webhook to its visible result, and its floor's."""

    total: float
    floor: float
    intake: float  # the webhook's answer (202)
    queue: float  # job row made → job started (outbox dispatcher, Celery, caps)
    steps: dict[str, float] = field(default_factory=dict)
    sandboxed: float = 0.0  # a rebase's floor with its rebase in a sandbox (e2e_sandboxed.py)


class BenchWorld(World):
    """tests/e2e/world.py's World, its worker at `onloop worker`'s defaults (concurrency 4,
    the settings' dispatch interval and lease) instead of the tests' quick ones."""

    def __init__(
        self, double: GitHubDouble, settings: Settings, db: Database, root: Path, concurrency: int
    ) -> None:
        self.double, self.settings, self.db, self.root = double, settings, db, root
        self.app = create_app(settings, db=db)
        self.client = self.app.test_client()
        self.worker = WorkerProcess(settings, root / "worker.log", concurrency=concurrency)
        self.worker.env["ONLOOP_DISPATCH_INTERVAL"] = str(settings.dispatch_interval)
        self.worker.env["ONLOOP_JOB_LEASE_SECONDS"] = str(settings.job_lease_seconds)
        self.worker.start()
        self.comments = {}


class Bench:
    def __init__(self, world: BenchWorld, floor: Floor) -> None:
        self.world, self.double, self.floor = world, world.double, floor
        self.n = 0
        self.sandboxed: SandboxedRebase | None = None  # made once the idle memory is read

    def _name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def branch(self, prefix: str, files: dict[str, str | bytes]) -> str:
        name = self._name(prefix)
        self.double.create_branch(REPO, name)
        self.double.commit(REPO, name, dict(files), message=f"Add {name}")
        return name

    def pull(self, prefix: str, files: dict[str, str | bytes]) -> tuple[str, int]:
        name = self.branch(prefix, files)
        return name, self.double.create_pull(REPO, name, title=name, user="alice").number

    def move_main(self) -> None:
        self.double.commit(REPO, "main", {f"main{self._name('m')}.txt": "on\n"}, message="Move")

    def pushed(self, branch: str, mark: int) -> bool:
        with self.double.lock:
            pushes = list(self.double.pushes[mark:])
        return any(u.ref == f"refs/heads/{branch}" for p in pushes for u in p.updates)

    def seen(self, done: Callable[[], bool], what: str, job_id: int | None = None) -> float:
        """perf_counter at the first poll (5 ms apart) where `done` holds; fails at once when
        the job `job_id` finished without it."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if done():
                return time.perf_counter()
            if job_id is not None and time.monotonic() % 1 < 0.01:
                job = self.world.job(job_id)
                if job.state in TERMINAL_STATES and not done():
                    raise AssertionError(f"{what}: job {job_id} {job.state} {job.result}")
            time.sleep(0.005)
        raise AssertionError(f"timed out waiting for {what}\n{self.world.worker.output()}")

    def quiet(self, settle: float = 0.3) -> None:
        """Until the worker's sandboxes have stopped changing for `settle` s: the last job's
        container removed, the warm pool refilled and primed. Each floor and each job starts
        on a machine that is not still tearing the last job down."""
        client = docker.APIClient()
        try:
            last, since, deadline = None, time.monotonic(), time.monotonic() + 60
            while time.monotonic() < deadline:
                found = client.containers(all=True, filters={"label": JOB_LABEL})
                root = str(self.world.root)  # this bench's, by their workspaces (World.containers)
                now = sorted(
                    (c["Id"], c["State"])
                    for c in found
                    if any(str(m.get("Source", "")).startswith(root) for m in c.get("Mounts") or [])
                )
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since >= settle:
                    return
                time.sleep(0.05)
        finally:
            client.close()

    def sample(
        self, job_id: int, begun: float, acked: float, visible: float, floor: float
    ) -> Sample:
        job = self.world.wait(job_id)
        assert job.state == JobState.SUCCEEDED, (job.kind, job.result, job.steps)
        queue = (job.started_at - job.created_at).total_seconds() if job.started_at else 0.0
        steps = {s["name"]: float(s.get("duration") or 0) for s in job.steps or []}
        return Sample(visible - begun, floor, acked - begun, queue, steps)

    # --- the four kinds -------------------------------------------------------------------
    def rebase_pr(self) -> Sample:
        branch, number = self.pull("rb", {f"rb{self.n}.py": "X = 1\n"})
        floor_branch = self.branch("rbf", {f"rbf{self.n}.py": "X = 1\n"})
        boxed_branch = self.branch("rbs", {f"rbs{self.n}.py": "X = 1\n"})
        self.move_main()
        self.quiet()
        floor = self.floor.rebase(floor_branch)
        sandboxed = 0.0
        if self.sandboxed is not None:
            old = self.double.branch_sha(REPO, boxed_branch)
            assert old is not None
            self.quiet()
            sandboxed = self.sandboxed.rebase(boxed_branch, old)
        self.quiet()
        mark, begun = len(self.double.pushes), time.perf_counter()
        job_id = self.world.comment("/agent rebase", "alice", number)
        acked = time.perf_counter()
        visible = self.seen(lambda: self.pushed(branch, mark), f"the rebase of {branch}", job_id)
        sample = self.sample(job_id, begun, acked, visible, floor)
        sample.sandboxed = sandboxed
        return sample

    def fix_ci(self) -> Sample:
        branch, number = self.pull("fx", {"bad.py": BAD})
        sha = self.double.branch_sha(REPO, branch)
        assert sha is not None
        run = add_run(self.double, REPO, sha, branch, [("lint", "failure", RUFF_LOG)])
        payload = workflow_run_failed(self.double, REPO, run, number, user="bob")
        floor_branch = self.branch("fxf", {"bad.py": BAD})
        self.quiet()
        floor = self.floor.ruff_fix(floor_branch)
        self.quiet()
        mark, begun = len(self.double.pushes), time.perf_counter()
        (job_id,) = self.world.deliver("workflow_run", payload)
        acked = time.perf_counter()
        visible = self.seen(lambda: self.pushed(branch, mark), f"the fix of {branch}", job_id)
        return self.sample(job_id, begun, acked, visible, floor)

    def fix_issue(self) -> Sample:
        issue = self.double.create_issue(REPO, "Typo in README", "It says teh.", user="alice")
        payload = issue_labeled(self.double, REPO, issue.number, user="carol")
        head = f"onloop/issue-{issue.number}"

        def opened() -> bool:
            with self.double.lock:
                pulls = [i.pull for i in self.double.repo(REPO).issues.values() if i.pull]
            return any(p.head_ref == head for p in pulls)

        self.quiet()
        floor = self.floor.agent_fix(AGENT, int(self._name("")))
        self.quiet()
        begun = time.perf_counter()
        (job_id,) = self.world.deliver("issues", payload)
        acked = time.perf_counter()
        visible = self.seen(opened, f"the pull request for #{issue.number}", job_id)
        return self.sample(job_id, begun, acked, visible, floor)

    def review_pr(self) -> Sample:
        branch, number = self.pull("rv", {"widgets.py": SPIN})

        def reviews() -> int:
            with self.double.lock:
                return sum(1 for v in self.double.reviews.values() if v.number == number)

        self.quiet()
        floor = self.floor.review(branch, number)  # a review on the same pull request
        self.quiet()
        mark = reviews()

        def reviewed() -> bool:
            return reviews() > mark

        begun = time.perf_counter()
        job_id = self.world.comment("/agent review", "alice", number)
        acked = time.perf_counter()
        visible = self.seen(reviewed, f"the review of #{number}", job_id)
        return self.sample(job_id, begun, acked, visible, floor)

    # --- concurrency ----------------------------------------------------------------------
    def rebases(self, prs: int, at_once: bool) -> tuple[float, list[float]]:
        """`prs` rebase jobs, all delivered at once or each after the last finished: seconds
        from the first webhook to the last push, and each job's webhook-to-push seconds."""
        pulls = [self.pull("cc", {f"cc{self.n}.py": "X = 1\n"}) for _ in range(prs)]
        self.move_main()
        mark, begun = len(self.double.pushes), time.perf_counter()
        each: list[float] = []
        if at_once:
            sent = [
                (time.perf_counter(), b, self.world.comment("/agent rebase", "alice", n))
                for b, n in pulls
            ]
            pending = {b: s for s, b, _ in sent}
            while pending:
                for b in [b for b in pending if self.pushed(b, mark)]:
                    each.append(time.perf_counter() - pending.pop(b))
                if time.perf_counter() - begun > 900:
                    raise AssertionError(f"still waiting for {sorted(pending)}")
                time.sleep(0.01)
            last = time.perf_counter()
            for _, _, job_id in sent:
                assert self.world.wait(job_id).state == JobState.SUCCEEDED
        else:
            for b, n in pulls:
                sent_at = time.perf_counter()
                job_id = self.world.comment("/agent rebase", "alice", n)
                pushed = functools.partial(self.pushed, b, mark)
                each.append(self.seen(pushed, b, job_id) - sent_at)
                last = time.perf_counter()
                assert self.world.wait(job_id).state == JobState.SUCCEEDED
        return last - begun, each


@contextmanager
def bench_world(
    root: Path, database_url: str | None, concurrency: int, pool: int
) -> Iterator[BenchWorld]:
    double = GitHubDouble(root / "double")
    redis = RedisServer(root).start()
    url = database_url or f"sqlite:///{root / 'onloop.db'}"
    migrate.upgrade(url)
    settings = settings_for(
        double,
        root,
        database_url=url,
        redis_url=redis.url,
        work_dir=root / "work",
        agent="command",
        agent_command=AGENT,
        sandbox_pool_size=pool,
    )
    files: dict[str, str | bytes] = {
        "pyproject.toml": PYPROJECT,
        "README.md": "teh widgets\n",
        "widgets.py": BASE,
    }
    double.create_repo(REPO, files=files)
    for login, role in (("alice", "write"), ("bob", "read"), ("carol", "maintain")):
        double.set_permission(REPO, login, role)
    db = Database(url)
    world = BenchWorld(double, settings, db, root, concurrency)
    try:
        world.authorize("alice")
        world.authorize("carol")
        yield world
    finally:
        world.worker.stop()
        db.dispose()
        redis.stop()
        remove_snapshots(root / "work" / "snapshots")
        double.close()


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(kind: str, samples: list[Sample]) -> None:
    total, floor = p50([s.total for s in samples]), p50([s.floor for s in samples])
    print(
        f"{kind}: webhook → visible p50 {total:.2f} s, floor {floor:.2f} s, "
        f"ratio {total / floor:.1f}x, overhead {total - floor:+.2f} s"
    )
    print(
        f"    intake {p50([s.intake for s in samples]) * 1000:.0f} ms, "
        f"queue (row → started) {p50([s.queue for s in samples]):.2f} s"
    )
    names = list(dict.fromkeys(n for s in samples for n in s.steps))
    upto = names[: names.index(VISIBLE[kind]) + 1] if VISIBLE[kind] in names else names
    outside = p50(
        [s.total - s.intake - s.queue - sum(s.steps.get(n, 0.0) for n in upto) for s in samples]
    )
    print(
        f"    outside any step, up to {VISIBLE[kind]!r} (start-up, feedback, polling): "
        f"{outside:.2f} s"
    )
    parts = [f"{n} {p50([s.steps.get(n, 0.0) for s in samples]):.2f}" for n in names]
    print("    steps (s, p50): " + ", ".join(parts))
    if boxed := p50([s.sandboxed for s in samples if s.sandboxed]):
        print(
            f"    the floor with its rebase in a sandbox, no onloop: {boxed:.2f} s, "
            f"{boxed / floor:.1f}x the floor; onloop {total / boxed:.1f}x that, "
            f"overhead {total - boxed:+.2f} s"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="measured runs per kind (p50)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which kinds, comma-separated")
    ap.add_argument("--concurrency", action="store_true", help="also N rebases at once")
    ap.add_argument("--prs", type=int, default=20, help="rebase jobs in --concurrency")
    ap.add_argument("--worker-concurrency", type=int, default=4, help="as `onloop worker`")
    ap.add_argument(
        "--pool-size",
        type=int,
        default=Settings.model_fields["sandbox_pool_size"].default,
        help="warm sandboxes (default: the worker's)",
    )
    ap.add_argument("--database-url", help="an empty, migrated database (default SQLite)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    root = Path(tempfile.mkdtemp(prefix="onloop-e2e-", dir="/var/tmp"))
    try:
        with bench_world(root, args.database_url, args.worker_concurrency, args.pool_size) as world:
            bench = Bench(world, Floor(world.double, root))
            wait_until(lambda: "ready." in world.worker.output(), 120, "the worker")
            if args.pool_size:
                wait_until(lambda: world.containers(), 120, "the warm pool's sandbox")
            time.sleep(3)
            memory(world, root, "at start (idle)")
            web_memory(world, root)
            rest = sandbox_at_rest_mb(world.settings.sandbox_image, root)
            print(f"memory: one sandbox at rest (docker stats) {rest:.1f} MiB")
            if "rebase_pr" in kinds:
                bench.sandboxed = SandboxedRebase(bench.floor, world.settings.sandbox_image)
            for kind in kinds:  # one warm-up run each: the mirror, the image, the pool
                getattr(bench, kind)()
            results = {k: [getattr(bench, k)() for _ in range(args.runs)] for k in kinds}
            print(
                f"runs: {args.runs} per kind after one warm-up; worker concurrency "
                f"{args.worker_concurrency}; database {world.settings.database_url.split(':')[0]}"
            )
            for kind in kinds:
                report(kind, results[kind])
            if args.concurrency:
                together, each = bench.rebases(args.prs, at_once=True)
                alone, each_alone = bench.rebases(args.prs, at_once=False)
                print(
                    f"concurrency: {args.prs} rebases at once: last push after "
                    f"{together:.1f} s, {args.prs / together * 60:.1f} jobs/min, "
                    f"per job p50 {p50(each):.1f} s, max {max(each):.1f} s"
                )
                print(
                    f"    one by one: last push after {alone:.1f} s, "
                    f"{args.prs / alone * 60:.1f} jobs/min, per job p50 {p50(each_alone):.1f} s"
                )
                print(f"    ratio one-by-one / at once: {alone / together:.2f}x")
            if bench.sandboxed is not None:
                bench.sandboxed.close()
            time.sleep(3)
            memory(world, root, "after the runs (idle)")
    except BaseException:
        print(f"kept {root} for a look", file=sys.stderr)
        raise
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
