"""One fault world: a private redis-server, PostgreSQL behind a gate, `onloop web` under
gunicorn and `onloop worker` as real processes, and the GitHub double with pull requests."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job
from tests.doubles.db_outage import DatabaseOutage
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.worker_proc import WorkerProcess, wait_until
from tests.faults.figures import Figures, measure
from tests.faults.procs import WebProcess
from tests.faults.sender import Delivery, Sender, delivery

REPO = "octo/faults"
CONCURRENCY = 4  # jobs the worker runs at once
USERS = [f"maintainer-{i}" for i in range(20)]  # who comment, each once a pull request


def scale() -> int:
    """Deliveries per run: ONLOOP_FAULT_SCALE (1000 gives the issue's figures)."""
    return int(os.environ.get("ONLOOP_FAULT_SCALE", "100"))


def seconds(at_1000: float) -> float:
    """A fault's length at 1000 deliveries, shortened in proportion (at least 3 s)."""
    return max(3.0, at_1000 * scale() / 1000)


@dataclass
class Stack:
    double: GitHubDouble
    db: Database
    root: Path
    settings: Settings  # as the processes see it: the database through the gate
    redis: RedisServer
    outage: DatabaseOutage
    pulls: list[int] = field(default_factory=list)
    used: int = 0  # (person, pull request) pairs that have asked already
    web: WebProcess | None = None
    worker: WorkerProcess | None = None
    runs: int = field(default=0)

    def start_web(self) -> WebProcess:
        self.runs += 1
        self.web = WebProcess(self.settings, self.root / f"web-{self.runs}.log").start()
        return self.web

    def start_worker(self, *, wait: bool = True) -> WorkerProcess:
        self.runs += 1
        log = self.root / f"worker-{self.runs}.log"
        self.worker = WorkerProcess(self.settings, log, concurrency=CONCURRENCY).start()
        if wait:
            self.worker_ready()
        return self.worker

    def worker_ready(self) -> None:
        """Consuming: a fault from here on meets a worker at work, not one starting up."""
        assert self.worker is not None
        log = self.worker.log
        wait_until(lambda: " ready." in log.read_text(errors="replace"), 60, "the worker")

    def sender(self) -> Sender:
        assert self.web is not None
        return Sender(self.web.url)

    def deliveries(self, count: int) -> list[Delivery]:
        """`count` different `/agent help` comments, each by a person on a pull request
        where they have not asked yet (asked again within a minute, it is not answered)."""
        return [
            self.ask(self.pull(slot // len(USERS)), USERS[slot % len(USERS)])
            for slot in range(self.used, self.used + count)
        ]

    def ask(self, number: int, user: str) -> Delivery:
        self.used += 1
        comment = self.double.add_comment(REPO, number, "/agent help", user)  # to react to
        payload = pr_comment(self.double, REPO, number, "/agent help", user)
        payload["comment"]["id"] = comment.id
        return delivery(payload)

    def pull(self, index: int) -> int:
        """The number of this world's `index`th pull request (opened when first needed)."""
        while len(self.pulls) <= index:
            n = len(self.pulls)
            self.double.create_branch(REPO, f"feature-{n}")
            self.double.commit(REPO, f"feature-{n}", {f"f{n}.py": "print(1)\n"}, message="f")
            self.pulls.append(self.double.create_pull(REPO, f"feature-{n}", user="alice").number)
        return self.pulls[index]

    def figures(self, name: str, sender: Sender, timeout: float = 120) -> Figures:
        found = measure(name, self.db, self.double, REPO, self.pulls, sender, timeout)
        print(found.line())
        return found

    def states(self) -> Counter[str]:
        """How many jobs are in each state."""
        with self.db.read() as s:
            rows = s.execute(select(Job.state, func.count()).group_by(Job.state)).all()
        return Counter({state: int(n) for state, n in rows})

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )

    def close(self) -> None:
        for proc in (self.web, self.worker):
            if proc is not None:
                proc.stop()
        self.outage.close()
        self.redis.stop()
        self.db.dispose()


def build(double: GitHubDouble, database_url: str, root: Path, **overrides: object) -> Stack:
    """The world, with web and worker running."""
    redis = RedisServer(root).start()
    outage = DatabaseOutage(database_url, root / "outage")
    settings = settings_for(double, root, database_url=outage.url, redis_url=redis.url, **overrides)
    double.create_repo(REPO, files={"README.md": "hello\n"})
    for user in USERS:
        double.set_permission(REPO, user, "write")
    stack = Stack(double, Database(database_url), root, settings, redis, outage)
    stack.start_worker(wait=False)  # both start up at once
    stack.start_web()
    stack.worker_ready()
    return stack
