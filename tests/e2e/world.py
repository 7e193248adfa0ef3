"""A shared end-to-end world: the Flask app, a real `onloop worker` process, Docker, Redis and
the GitHub double, with a pull request to work on and helpers to trigger and observe jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors

from app.core.crypto import TokenBox
from app.core.settings import Settings
from app.github.user_tokens import TokenPair, store
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job
from app.web import create_app
from tasks.sandbox.docker_backend import JOB_LABEL
from tasks.sandbox.snapshots import KEY_LABEL, SNAPSHOT_LABEL
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.checks import CheckRun
from tests.doubles.github.model import Call, Comment
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until

REPO = "octo/widgets"


class World:
    """One repository `octo/widgets` on the double; tests add its files and pull requests."""

    def __init__(self, double: GitHubDouble, settings: Settings, db: Database, root: Path):
        self.double, self.settings, self.db, self.root = double, settings, db, root
        self.app = create_app(settings, db=db)
        self.client = self.app.test_client()
        self.worker = WorkerProcess(settings, root / "worker.log").start()
        self.comments: dict[int, Comment] = {}  # job id → the comment that asked for it

    # --- acting --------------------------------------------------------------------------
    def authorize(self, login: str) -> None:
        """`login` has authorised onloop: a stored user token the double accepts."""
        token = self.double.issue_user_token(login)
        user = self.double.user(login)
        store(
            self.db, TokenBox(SECRET_KEY), user.id, user.login, TokenPair(token, None, None, None)
        )

    def deliver(self, event: str, payload: dict[str, Any]) -> list[int]:
        """GitHub delivers `payload` as `event`; the ids of the jobs it made or joined."""
        response = deliver(self.client, event, payload)
        assert response.status_code == 202, response.get_data(as_text=True)
        return [int(i) for i in response.get_json()["jobs"]]

    def comment(self, body: str, user: str, number: int = 1) -> int:
        """`user` comments `body` on the PR (the comment exists on the double, as on GitHub,
        so it can be reacted to) and GitHub delivers it; the job's id."""
        made = self.double.add_comment(REPO, number, body, user)
        payload = pr_comment(self.double, REPO, number, body, user)
        payload["comment"]["id"] = made.id
        response = deliver(self.client, "issue_comment", payload)
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        self.comments[int(job_id)] = made
        return int(job_id)

    # --- observing -----------------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        with self.db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job

    def wait(self, job_id: int, states: tuple[str, ...] = TERMINAL_STATES) -> Job:
        wait_until(lambda: self.job(job_id).state in states, 180, f"job {job_id} in {states}")
        return self.job(job_id)

    def wait_step(self, job_id: int, name: str) -> Job:
        """Until the job is running its step `name`."""

        def running() -> bool:
            job = self.job(job_id)
            steps = job.steps or []
            # A job that ended never gets there: say how it ended, not "timed out" later.
            if job.state in TERMINAL_STATES:
                raise AssertionError((job.state, job.result, steps, self.worker.output()))
            return bool(steps) and steps[-1]["name"] == name and steps[-1]["state"] == "running"

        wait_until(running, 180, f"job {job_id} running {name}")
        return self.job(job_id)

    def bot_comments(self, number: int = 1) -> list[Comment]:
        return [
            c for c in self.double.comments(REPO, number) if c.user == self.double.app.bot_login
        ]

    def bot_comment_with(self, text: str, number: int = 1) -> Comment:
        """The one bot comment that says `text`, once it does (status comments are edited a
        moment after the job's row is final)."""
        wait_until(lambda: [c for c in self.bot_comments(number) if text in c.body], 60, text)
        (found,) = [c for c in self.bot_comments(number) if text in c.body]
        return found

    def final_status(self, job_id: int, number: int = 1) -> Comment:
        """The job's status comment once it has its last word (it is edited a moment after
        the job's row is final)."""

        def final() -> Comment | None:
            found = [
                c
                for c in self.bot_comments(number)
                if f"<!-- onloop:job-{job_id}-status -->" in c.body and "**Working**" not in c.body
            ]
            return found[0] if found else None

        return wait_until(final, 60, f"job {job_id}'s last status")

    def completed_runs(self, sha: str) -> list[CheckRun]:
        """The check runs on `sha`, once every one of them has completed."""

        def done() -> list[CheckRun] | None:
            runs = self.double.checks.for_commit(REPO, sha)
            return runs if runs and all(r.status == "completed" for r in runs) else None

        return wait_until(done, 60, f"the check runs on {sha} to complete")

    def edits(self, comment: Comment) -> list[Call]:
        """The PATCHes of one comment that the double answered."""
        path = f"/repos/{REPO}/issues/comments/{comment.id}"
        return [c for c in self.double.calls("PATCH", path) if c.path == path and c.status == 200]

    def reactions(self, job_id: int) -> list[tuple[str, str]]:
        return [(r.content, r.user) for r in self.comments[job_id].reactions]

    def containers(self) -> list[str]:
        """Ids of this test's sandbox containers, found by their workspace under this test's
        directory (a warm pool container keeps its empty job label when a job takes it)."""
        client = docker.APIClient()
        try:
            root = str(self.root)
            return [
                c["Id"]
                for c in client.containers(all=True, filters={"label": JOB_LABEL})
                if any(str(m.get("Source", "")).startswith(root) for m in c.get("Mounts") or [])
            ]
        finally:
            client.close()

    def running(self, command: str) -> list[str]:
        """Ids of this test's containers in which `command` runs now."""
        client = docker.APIClient()
        found = []
        try:
            for cid in self.containers():
                try:
                    processes = client.top(cid, ps_args="-o pid,args").get("Processes") or []
                except docker.errors.APIError:  # gone meanwhile
                    continue
                if any(command in " ".join(p) for p in processes):
                    found.append(cid)
        finally:
            client.close()
        return found


def make_world(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    files: dict[str, str | bytes] | None = None,
    **overrides: Any,
) -> Iterator[World]:
    """For a test module's `world` fixture (`yield from make_world(...)`): the double with
    `octo/widgets` holding `files` (alice: write, bob: read, carol: maintain) and a worker
    with the settings `overrides`; afterwards, onloop never merged nor approved anything."""
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        feedback_interval=0,  # every step change is its own edit: countable
        **overrides,
    )
    github_double.create_repo(REPO, files=files or {"README.md": "widgets\n"})
    for login, role in (("alice", "write"), ("bob", "read"), ("carol", "maintain")):
        github_double.set_permission(REPO, login, role)
    db = Database(database_url)
    world = World(github_double, settings, db, tmp_path)
    yield world
    world.worker.stop()
    db.dispose()
    redis.stop()
    remove_snapshots(tmp_path / "work" / "snapshots")
    assert not github_double.merges and not github_double.approvals


def remove_snapshots(state_dir: Path) -> None:
    """Remove the dependency snapshots a world's worker made (their keys are in its store's
    `state_dir`): other tests count the snapshots on the shared Docker daemon."""
    keys = {marker.stem for marker in state_dir.glob("*.used")}
    if not keys:
        return
    client = docker.from_env()
    try:
        for image in client.images.list(filters={"label": SNAPSHOT_LABEL}):
            if (image.labels or {}).get(KEY_LABEL) in keys:
                client.images.remove(image.id, force=True)
    finally:
        client.close()
