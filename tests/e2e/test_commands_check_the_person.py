"""Every command checks the person (issue 15, item 5): cancel needs the trigger permission or
being the job's requester, help and status answer once a minute, an outsider gets one notice,
and identical commands of two people are two jobs. Webhooks go into the web app, the worker's
real runners run the jobs against the GitHub double, with a real Redis and database."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.crypto import TokenBox
from app.github.user_tokens import TokenPair, store
from app.store.db import Database
from app.store.models import Job, JobState
from app.web import create_app
from tasks.runner.lease import claim
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.model import Comment
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver

REPO = "octo/widgets"


class Thread:
    """Pull request #1 of `octo/widgets` (alice: write, bob: read, carol: maintain), the web
    app that takes its webhooks and a worker (in this process) that runs the jobs."""

    def __init__(self, double: GitHubDouble, worker: Worker, db: Database) -> None:
        self.double, self.worker, self.db = double, worker, db
        self.client = create_app(worker.settings, db=db).test_client()

    def comment(self, body: str, user: str) -> int:
        """`user` comments `body` on the PR and GitHub delivers it; the job's id."""
        made = self.double.add_comment(REPO, 1, body, user)
        payload = pr_comment(self.double, REPO, 1, body, user)
        payload["comment"]["id"] = made.id
        response = deliver(self.client, "issue_comment", payload)
        assert response.status_code == 202, response.get_data(as_text=True)
        (job_id,) = response.get_json()["jobs"]
        return int(job_id)

    def run(self, job_id: int) -> Job:
        self.worker.jobs.run(job_id)
        return self.job(job_id)

    def job(self, job_id: int) -> Job:
        with self.db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job

    def running(self, job_id: int) -> None:
        """The job is taken by another worker, busy in its sandbox."""
        assert claim(self.db, job_id, "another-worker", 600)

    def bot_comments(self) -> list[Comment]:
        return [c for c in self.double.comments(REPO, 1) if c.user == self.double.app.bot_login]

    def authorize(self, login: str) -> None:
        token = self.double.issue_user_token(login)
        user = self.double.user(login)
        store(self.db, TokenBox(SECRET_KEY), user.id, login, TokenPair(token, None, None, None))


@pytest.fixture
def thread(
    github_double: GitHubDouble, database_url: str, db: Database, tmp_path: Path
) -> Iterator[Thread]:
    redis = RedisServer(tmp_path).start()  # its own: the once-a-day keys of other runs
    settings = settings_for(
        github_double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        feedback_interval=0,
    )
    double = github_double
    double.create_repo(REPO, files={"README.md": "widgets\n", "lib.py": "A = 1\n"})
    double.create_branch(REPO, "feature")
    double.commit(REPO, "feature", {"feature.py": "F = 1\n"}, message="Add feature")
    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Move main on")
    double.create_pull(REPO, "feature", title="Feature", user="alice")
    for login, role in (("alice", "write"), ("bob", "read"), ("carol", "maintain")):
        double.set_permission(REPO, login, role)
    worker = Worker(settings, db=db)
    yield Thread(double, worker, db)
    worker.close()
    redis.stop()


def test_an_outsiders_cancel_leaves_a_maintainers_running_rebase(thread: Thread) -> None:
    rebase = thread.comment("/agent rebase", "carol")
    thread.running(rebase)
    cancel = thread.run(thread.comment("/agent cancel", "bob"))
    assert thread.job(rebase).state == JobState.RUNNING
    assert cancel.state == JobState.FAILED and cancel.result["error"] == "refused", cancel.result
    assert cancel.result["cancelled"] == [] and cancel.result["left_running"] == [rebase]
    (told,) = thread.bot_comments()
    assert "@bob" in told.body and "write permission" in told.body and "Cancelled" not in told.body


def test_the_requester_cancels_their_own_job_and_only_theirs(thread: Thread) -> None:
    thread.double.set_permission(REPO, "bob", "write")
    own = thread.comment("/agent review", "bob")
    other = thread.comment("/agent rebase", "carol")
    thread.running(own)
    thread.running(other)
    thread.double.set_permission(REPO, "bob", "read")  # bob's write was taken away meanwhile
    cancel = thread.run(thread.comment("/agent cancel", "bob"))
    assert cancel.state == JobState.SUCCEEDED, cancel.result
    assert cancel.result["cancelled"] == [own] and cancel.result["left_running"] == [other]
    assert thread.job(own).state == JobState.CANCELLED
    assert thread.job(other).state == JobState.RUNNING
    # With the trigger permission, anyone's job: alice cancels carol's.
    assert thread.run(thread.comment("/agent cancel", "alice")).result == {"cancelled": [other]}
    assert thread.job(other).state == JobState.CANCELLED
    assert thread.job(other).result == {"reason": "cancelled by @alice"}


def test_help_twice_within_a_minute_is_answered_once(thread: Thread) -> None:
    first = thread.run(thread.comment("/agent help", "alice"))
    again = thread.run(thread.comment("/agent help", "alice"))
    assert first.state == again.state == JobState.SUCCEEDED, (first.result, again.result)
    assert "comment" in first.result and "answered" in again.result["skipped"]
    (answer,) = thread.bot_comments()
    assert "`/agent cancel`" in answer.body
    # per person: carol's help, and alice's status, are answered
    assert "comment" in thread.run(thread.comment("/agent help", "carol")).result
    assert "jobs" in thread.run(thread.comment("/agent status", "alice")).result
    assert "skipped" in thread.run(thread.comment("/agent status", "alice")).result
    assert len(thread.bot_comments()) == 3


def test_an_outsiders_commands_get_one_notice_then_silence(thread: Thread) -> None:
    jobs = [thread.run(thread.comment(f"/agent {verb}", "bob")) for verb in ("help", "rebase")]
    jobs.append(thread.run(thread.comment("/agent status", "bob")))
    jobs.append(thread.run(thread.comment("/agent cancel", "bob")))
    assert all(j.state == JobState.FAILED and j.result["error"] == "refused" for j in jobs)
    assert all(j.result["rule"] == "trigger_permission" for j in jobs), [j.result for j in jobs]
    (notice,) = thread.bot_comments()
    assert "@bob" in notice.body and "write permission" in notice.body
    assert "maintainer can run" in notice.body
    assert "quiet" not in jobs[0].result
    for later in jobs[1:]:
        assert later.result["quiet"] is True and "told so" in later.result["reason"]
    assert not thread.double.checks.runs and not thread.double.pushes


def test_an_outsiders_rebase_does_not_take_a_maintainers_identical_command(
    thread: Thread,
) -> None:
    outsider = thread.comment("/agent rebase", "bob")
    maintainer = thread.comment("/agent rebase", "alice")
    assert maintainer != outsider  # alice's is a job of her own, not joined to bob's
    again = thread.comment("/agent rebase", "alice")
    assert again == maintainer  # a person's own repeat joins their live job
    assert thread.run(outsider).result["error"] == "refused"
    job = thread.job(maintainer)
    assert (job.state, job.requested_by) == (JobState.QUEUED, "alice")


@pytest.mark.docker
def test_after_an_outsiders_rebase_the_maintainers_runs_as_the_maintainer(thread: Thread) -> None:
    thread.authorize("alice")
    outsider = thread.comment("/agent rebase", "bob")
    maintainer = thread.comment("/agent rebase", "alice")
    assert thread.run(outsider).result["error"] == "refused"
    job = thread.run(maintainer)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps)
    (push,) = thread.double.pushes
    assert (push.identity.kind, push.identity.login) == ("user", "alice")


def test_a_broken_repository_file_drops_no_stricter_trigger_permission(thread: Thread) -> None:
    """`trigger_permission: admin` with a typo elsewhere in the file: while it is invalid, a
    writer cannot cancel a maintainer's job as if the built-in `write` applied."""
    broken = "trigger_permission: admin\nsandbox:\n  timeout: soon\n"
    thread.double.commit(REPO, "main", {".github/onloop.yml": broken}, message="Tighten")
    rebase = thread.comment("/agent rebase", "carol")
    thread.running(rebase)
    cancel = thread.run(thread.comment("/agent cancel", "alice"))
    assert thread.job(rebase).state == JobState.RUNNING
    assert cancel.state == JobState.FAILED and cancel.result["left_running"] == [rebase]


@pytest.mark.docker
def test_an_outsiders_rebase_fetches_nothing_a_maintainers_fetches_early(thread: Thread) -> None:
    """The mirror fetch starts once the policy and the authorisation have passed: an
    outsider's command makes the worker fetch nothing (their head could be any size), nor
    does a job that waits for the person's authorisation."""
    assert thread.run(thread.comment("/agent rebase", "bob")).result["error"] == "refused"
    waiting = thread.run(thread.comment("/agent rebase", "alice"))  # not authorised yet
    assert waiting.state == JobState.WAITING_FOR_AUTHORIZATION, waiting.result
    for fetching in [t for t in threading.enumerate() if t.name == "mirror-fetch"]:
        fetching.join(30)  # a fetch either job had started would have reached the double
    assert thread.double.calls(surface="git") == []
    thread.authorize("carol")
    job = thread.run(thread.comment("/agent rebase", "carol"))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps)
    fetched = thread.double.calls("POST", "/octo/widgets.git/git-upload-pack", surface="git")
    assert fetched  # the same command from someone permitted does fetch
