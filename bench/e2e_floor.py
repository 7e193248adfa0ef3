"""The floors for bench/e2e.py: the same git and tool commands a job must run, with no onloop
(fetch, rebase, push; clone, `ruff check --fix`, commit, push), and its memory readings."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import requests

from tasks.sandbox.base import Limits
from tasks.sandbox.docker_backend import DockerBackend
from tests.doubles.github.double import GitHubDouble
from tests.e2e.world import World
from tests.faults.procs import WebProcess

REPO = "octo/widgets"


class Floor:
    """Runs a kind's commands directly against the double, as the person `login` would."""

    def __init__(self, double: GitHubDouble, root: Path, login: str = "alice") -> None:
        self.double, self.root = double, root
        self.token = double.issue_user_token(login)
        self.env = double.git_env(self.token)
        self.url = double.clone_url(REPO)
        self.warm = root / "floor-warm"  # the floor's own warm clone, as onloop's mirror
        if not self.warm.exists():
            self.git(["clone", "-q", self.url, str(self.warm)])

    def git(self, args: list[str], cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout

    def run(self, argv: list[str], cwd: Path) -> None:
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False)

    def fresh_clone(self, branch: str) -> Path:
        dest = self.root / f"floor-{uuid.uuid4().hex[:8]}"
        self.git(["clone", "-q", "--branch", branch, self.url, str(dest)])
        return dest

    def commit_and_push(self, work: Path, branch: str, message: str) -> None:
        self.git(["add", "-A"], work)
        self.git(["commit", "-q", "-m", message], work)
        self.git(["push", "-q", "origin", f"HEAD:refs/heads/{branch}"], work)

    def api(self, method: str, path: str, body: dict[str, Any]) -> None:
        response = requests.request(
            method,
            f"{self.double.api_url}{path}",
            json=body,
            headers={"Authorization": f"token {self.token}"},
            timeout=30,
        )
        response.raise_for_status()

    # --- the four kinds, each timed from its first command to its visible result ---------
    def rebase(self, branch: str) -> float:
        """fetch, rebase onto main, push --force-with-lease, in a warm clone."""
        begun = time.perf_counter()
        self.git(["fetch", "-q", "origin"], self.warm)
        self.git(["checkout", "-q", "-B", branch, f"origin/{branch}"], self.warm)
        self.git(["rebase", "-q", "origin/main"], self.warm)
        self.git(["push", "-q", "--force-with-lease", "origin", branch], self.warm)
        return time.perf_counter() - begun

    def ruff_fix(self, branch: str) -> float:
        """clone, `ruff check --fix .`, commit, push."""
        begun = time.perf_counter()
        work = self.fresh_clone(branch)
        self.run(["ruff", "check", "--fix", "--no-cache", "--quiet", "."], work)
        self.commit_and_push(work, branch, "Fix ruff")
        took = time.perf_counter() - begun
        shutil.rmtree(work)
        return took

    def agent_fix(self, agent: str, number: int) -> float:
        """clone, the scripted agent, commit on a new branch, push, open the pull request."""
        begun = time.perf_counter()
        work = self.fresh_clone("main")
        (work / "TASK.md").write_text("It says teh.\n")
        self.run(["bash", "-c", agent], work)
        (work / "TASK.md").unlink()
        branch = f"floor/issue-{number}"
        self.commit_and_push(work, branch, f"Fix #{number}")
        self.api("POST", f"/repos/{REPO}/pulls", {"title": "Fix", "head": branch, "base": "main"})
        took = time.perf_counter() - begun
        shutil.rmtree(work)
        return took

    def review(self, branch: str, number: int) -> float:
        """clone, `ruff check --output-format json`, `ruff check --fix --diff`, post a review."""
        begun = time.perf_counter()
        work = self.fresh_clone(branch)
        base = ["ruff", "check", "--no-cache", "--exit-zero"]
        self.run([*base, "--output-format", "json", "."], work)
        self.run([*base, "--fix", "--diff", "."], work)
        review = {"event": "COMMENT", "body": "floor review"}
        self.api("POST", f"/repos/{REPO}/pulls/{number}/reviews", review)
        took = time.perf_counter() - begun
        shutil.rmtree(work)
        return took


# --- memory -------------------------------------------------------------------------------
def rss_mb(pid: int) -> float:
    """Resident set size of one process, in MiB (from /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(p) for p in text)
    return out


def sandbox_at_rest_mb(image: str, root: Path, settle: float = 3.0) -> float:
    """One sandbox as onloop starts it (its DockerBackend, default limits, an empty
    workspace), after `settle` seconds with nothing run in it."""
    workspace = root / "rest-workspace"
    workspace.mkdir(exist_ok=True)
    client = docker.from_env()
    try:
        box = DockerBackend(client).start(
            random.randrange(10**9, 2 * 10**9), image, workspace, Limits()
        )
        try:
            time.sleep(settle)
            return container_mb(box.container_id)
        finally:
            box.stop()
    finally:
        client.close()


def container_mb(container_id: str) -> float:
    """A container's memory as `docker stats` shows it: usage less its inactive file cache."""
    client = docker.APIClient()
    try:
        stats = client.stats(container_id, stream=False)
    finally:
        client.close()
    memory = stats.get("memory_stats") or {}
    inactive = (memory.get("stats") or {}).get("inactive_file", 0)
    return float(memory.get("usage", 0) - inactive) / 2**20


def memory(world: World, root: Path, label: str) -> None:
    worker = world.worker.proc
    assert worker is not None
    tree = [worker.pid, *children(worker.pid)]
    print(
        f"memory {label}: celery worker RSS {sum(rss_mb(p) for p in tree):.0f} MiB "
        f"({len(tree)} process{'es' if len(tree) > 1 else ''})",
        end="",
    )
    sandboxes = [container_mb(c) for c in world.containers()]
    shown = ", ".join(f"{m:.1f}" for m in sandboxes) or "none"
    print(f"; warm pool containers: {shown} MiB")


def web_memory(world: World, root: Path) -> None:
    web = WebProcess(world.settings, root / "web.log").start()
    try:
        time.sleep(2)
        assert web.proc is not None
        workers = children(web.proc.pid)
        each = ", ".join(f"{rss_mb(p):.0f}" for p in workers)
        print(
            f"memory idle web: gunicorn master {rss_mb(web.proc.pid):.0f} MiB, workers {each} MiB"
        )
    finally:
        web.stop()
