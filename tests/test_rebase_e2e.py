"""`/agent rebase` end to end: webhook → outbox → Redis → `onloop worker` → Docker sandbox →
push through the GitHub double with the commenter's own token."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from app import create_app
from app.crypto import TokenBox
from app.db import Database
from app.models import Job, JobState, utcnow
from app.oauth import resume_jobs
from app.settings import Settings
from app.state import onloop
from app.user_tokens import TokenPair, store
from tests.conftest import deliver
from tests.github_double.double import GitHubDouble
from tests.github_double.fixtures import SECRET_KEY, settings_for
from tests.payloads import pr_comment
from tests.redis_server import RedisServer
from tests.worker_proc import WorkerProcess, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]
REPO = "octo/widgets"


def git(double: GitHubDouble, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=double.git_dir(REPO), capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else f"!{done.returncode}"


def authorize(db: Database, double: GitHubDouble, login: str) -> None:
    token = double.issue_user_token(login)
    user = double.user(login)
    store(db, TokenBox(SECRET_KEY), user.id, user.login, TokenPair(token, None, None, None))


class World:
    def __init__(self, double: GitHubDouble, settings: Settings, db: Database, log_dir: Path):
        self.double, self.settings, self.db = double, settings, db
        self.app = create_app(settings, db=db)
        self.client = self.app.test_client()
        self.worker = WorkerProcess(settings, log_dir / "worker.log").start()

    def comment(self, body: str, user: str, number: int = 1) -> int:
        response = deliver(
            self.client, "issue_comment", pr_comment(self.double, REPO, number, body, user)
        )
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        return int(job_id)

    def job(self, job_id: int) -> Job:
        with self.db.sessions() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job

    def wait(self, job_id: int, states: tuple[str, ...] = JobState.TERMINAL) -> Job:
        wait_until(lambda: self.job(job_id).state in states, 120, f"job {job_id}")
        return self.job(job_id)

    def user_comments(self, login: str, number: int = 1) -> list[Any]:
        return [c for c in self.double.comments(REPO, number) if c.user == login]


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
    )
    double = github_double
    double.create_repo(REPO, files={"README.md": "widgets\n", "lib.py": "A = 1\n"})
    double.create_branch(REPO, "feature")
    double.commit(REPO, "feature", {"feature.py": "print('feature')\n"}, message="Add feature")
    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    double.create_pull(REPO, "feature", title="Feature", user="alice")
    for login, role in (("alice", "write"), ("bob", "read"), ("carol", "maintain")):
        double.set_permission(REPO, login, role)
    db = Database(database_url)
    world = World(double, settings, db, tmp_path)
    yield world
    world.worker.stop()
    db.dispose()
    redis.stop()
    assert not double.merges and not double.approvals


def test_clean_rebase_is_pushed_with_the_commenters_token(world: World) -> None:
    authorize(world.db, world.double, "alice")
    old_head = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    new_head = world.double.branch_sha(REPO, "feature")
    main = world.double.branch_sha(REPO, "main")
    assert new_head != old_head
    assert git(world.double, "merge-base", "--is-ancestor", str(main), str(new_head)) == ""
    assert git(world.double, "diff", "--name-only", f"{main}..{new_head}") == "feature.py"
    (push,) = world.double.pushes
    assert (push.identity.kind, push.identity.login) == ("user", "alice")
    assert push.updates[0].old == old_head and push.updates[0].new == new_head
    (result,) = world.user_comments("alice")
    assert "Rebased `feature` onto `main`" in result.body
    assert [s["name"] for s in job.steps] == ["policy", "authorization", "rebase", "push", "report"]


def test_conflict_leaves_the_branch_and_names_the_files(world: World) -> None:
    authorize(world.db, world.double, "alice")
    world.double.commit(REPO, "feature", {"lib.py": "A = 'feature'\n"}, message="Clash")
    head = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.FAILED and job.result["conflicts"] == ["lib.py"], job.result
    assert world.double.branch_sha(REPO, "feature") == head and not world.double.pushes
    (result,) = world.user_comments("alice")
    assert "`lib.py`" in result.body and "git rebase origin/main" in result.body


def test_read_only_commenter_is_refused(world: World) -> None:
    authorize(world.db, world.double, "bob")
    job = world.wait(world.comment("/agent rebase", "bob"))
    assert job.state == JobState.FAILED and job.result["error"] == "refused"
    assert not world.double.pushes
    (notice,) = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert "needs write permission" in notice.body and "@bob" in notice.body


def test_unauthorized_person_is_asked_then_the_job_resumes(world: World) -> None:
    job_id = world.comment("/agent rebase", "carol")
    job = world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION, *JobState.TERMINAL))
    assert job.state == JobState.WAITING_FOR_AUTHORIZATION, (job.result, world.worker.output())
    (ask,) = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert "@carol" in ask.body and "/oauth/login" in ask.body
    assert not world.double.pushes
    authorize(world.db, world.double, "carol")
    carol = world.double.user("carol")
    assert resume_jobs(onloop(world.app), carol.id, "carol") == [job_id]
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (push,) = world.double.pushes
    assert push.identity.login == "carol"
    bot = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert len(bot) == 1  # the request was not repeated


def test_waiting_job_expires_with_a_last_comment(world: World) -> None:
    job_id = world.comment("/agent rebase", "carol")
    world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION,))
    with world.db.session() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(finished_at=utcnow() - timedelta(days=2))
        )
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["error"] == "authorization expired"
    (last,) = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert "has now stopped" in last.body and not world.double.pushes
