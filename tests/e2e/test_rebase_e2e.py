"""`/agent rebase` end to end: webhook → outbox → Redis → `onloop worker` → Docker sandbox →
push through the GitHub double with the commenter's own token."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app.core.crypto import TokenBox
from app.core.settings import Settings
from app.github.user_tokens import TokenPair, store
from app.store.db import Database
from app.store.models import TERMINAL_STATES, Job, JobState, UserAccount, utcnow
from app.web import create_app
from app.web.oauth import resume_jobs
from app.web.state import onloop
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for
from tests.doubles.markdown import code_spans, outside_code
from tests.doubles.oauth_flow import authorization_revoked, sign_in
from tests.doubles.payloads import pr_comment
from tests.doubles.redis_server import RedisServer
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import WorkerProcess, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.slow]
REPO = "octo/widgets"
FORK = "dave/widgets"


def git(double: GitHubDouble, *args: str, repo: str = REPO) -> str:
    done = subprocess.run(
        ["git", *args], cwd=double.git_dir(repo), capture_output=True, text=True, check=False
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
        with self.db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job

    def wait(self, job_id: int, states: tuple[str, ...] = TERMINAL_STATES) -> Job:
        wait_until(lambda: self.job(job_id).state in states, 120, f"job {job_id}")
        return self.job(job_id)

    def user_comments(self, login: str, number: int = 1) -> list[Any]:
        return [c for c in self.double.comments(REPO, number) if c.user == login]

    def bot_comments(self, number: int = 1) -> list[Any]:
        return self.user_comments(self.double.app.bot_login, number)

    def asks(self, number: int = 1) -> list[Any]:
        """onloop's requests to authorise it (its other comments, e.g. status, aside)."""
        return [c for c in self.bot_comments(number) if "/oauth/login" in c.body]

    def sign_in(self, login: str) -> str:
        """`login` authorises onloop through /oauth/login, the double and /oauth/callback."""
        return str(sign_in(self.client, self.double, login).get_data(as_text=True))

    def accounts(self) -> list[str]:
        with self.db.read() as s:
            return list(s.scalars(select(UserAccount.login)))

    def fork_pull(self, *, maintainer_can_modify: bool) -> int:
        """dave's fork with a branch `patch` and its pull request; then main moves on."""
        self.double.create_repo(FORK, fork_of=REPO)
        self.double.commit(FORK, "patch", {"patch.py": "P = 1\n"}, message="Add patch")
        number = self.double.create_pull(
            REPO, "dave:patch", user="dave", maintainer_can_modify=maintainer_can_modify
        ).number
        self.double.commit(REPO, "main", {"lib.py": "A = 3\n"}, message="Move main again")
        return number


@contextlib.contextmanager
def open_world(
    double: GitHubDouble, database_url: str, tmp_path: Path, **overrides: Any
) -> Iterator[World]:
    """`octo/widgets` with a PR from `feature`, and a worker under settings `overrides`."""
    redis = RedisServer(tmp_path).start()
    settings = settings_for(
        double,
        tmp_path,
        database_url=database_url,
        redis_url=redis.url,
        work_dir=tmp_path / "work",
        **overrides,
    )
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


@pytest.fixture
def world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[World]:
    """`octo/widgets` and a worker; parametrized indirectly with the text of an
    organisation file (ONLOOP_CONFIG_FILE) when the test needs one."""
    org: dict[str, Path] = {}
    if getattr(request, "param", None) is not None:
        org["config_file"] = tmp_path / "org.yml"
        org["config_file"].write_text(request.param)
    with open_world(github_double, database_url, tmp_path, **org) as world:
        yield world


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


def test_conflicting_file_names_are_quoted_as_code(world: World) -> None:
    """A file name from the PR cannot leave its code span to mention or link anyone."""
    authorize(world.db, world.double, "alice")
    name = "a`@mallory`b.py"
    world.double.commit(REPO, "main", {name: "main\n"}, message="Add on main")
    world.double.commit(REPO, "feature", {name: "feature\n"}, message="Clash")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.FAILED and name in job.result["conflicts"], job.result
    (result,) = world.user_comments("alice")
    assert name in code_spans(result.body) and "@mallory" not in outside_code(result.body)


def test_a_conflicting_name_with_spaces_is_one_file(world: World) -> None:
    authorize(world.db, world.double, "alice")
    names = ["a b.py", "c  d e.py"]
    world.double.commit(REPO, "main", {n: "main\n" for n in names}, message="Add on main")
    world.double.commit(REPO, "feature", {n: "feature\n" for n in names}, message="Clash")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.FAILED and job.result["conflicts"] == names, job.result
    (result,) = world.user_comments("alice")
    assert set(names) <= set(code_spans(result.body))


def test_a_branch_name_stays_code_in_the_report(world: World) -> None:
    """A head branch named by the PR's author cannot leave its code span to mention anyone."""
    authorize(world.db, world.double, "alice")
    branch = "f`@mallory`x"
    world.double.create_branch(REPO, branch, "feature")
    number = world.double.create_pull(REPO, branch, title="Odd", user="alice").number
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (result,) = world.user_comments("alice", number)
    assert "Rebased" in result.body and branch in code_spans(result.body), result.body
    assert "@mallory" not in outside_code(result.body)


def test_read_only_commenter_is_refused(world: World) -> None:
    authorize(world.db, world.double, "bob")
    job = world.wait(world.comment("/agent rebase", "bob"))
    assert job.state == JobState.FAILED and job.result["error"] == "refused"
    assert not world.double.pushes
    (notice,) = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert "needs write permission" in notice.body and "@bob" in notice.body


def test_unauthorized_person_is_asked_then_the_job_resumes(world: World) -> None:
    job_id = world.comment("/agent rebase", "carol")
    job = world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION, *TERMINAL_STATES))
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
    with world.db.transaction() as s:
        s.execute(
            update(Job).where(Job.id == job_id).values(finished_at=utcnow() - timedelta(days=2))
        )
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["error"] == "authorization expired"
    (last,) = [c for c in world.double.comments(REPO, 1) if c.user == world.double.app.bot_login]
    assert "has now stopped" in last.body and not world.double.pushes


def test_unauthorized_person_signs_in_through_the_flow_and_the_job_resumes(world: World) -> None:
    job_id = world.comment("/agent rebase", "carol")
    world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION,))
    (ask,) = world.asks()
    assert f"({world.settings.public_url}/oauth/login)" in ask.body and "@carol" in ask.body
    page = world.sign_in("carol")  # the callback itself puts the job back in the queue
    assert "1 waiting job(s) resumed" in page
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    (push,) = world.double.pushes
    assert (push.identity.kind, push.identity.login) == ("user", "carol")
    assert len(world.bot_comments()) == 1  # the request was not repeated


def test_an_expired_access_token_is_refreshed_and_the_job_goes_on(world: World) -> None:
    world.sign_in("alice")
    with world.db.transaction() as s:  # eight hours later, for onloop and for GitHub
        s.execute(update(UserAccount).values(access_expires_at=utcnow() - timedelta(minutes=1)))
    world.double.oauth.expire_user_tokens("alice")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    assert [r.login for r in world.double.oauth.refreshes] == ["alice"]
    (push,) = world.double.pushes
    assert push.identity.login == "alice" and not world.asks()


def test_a_token_refused_on_push_is_refreshed_and_pushed_again(world: World) -> None:
    world.sign_in("alice")
    world.double.oauth.expire_user_tokens("alice")  # early: onloop still thinks it is good
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    assert len(world.double.oauth.refreshes) == 1
    (push,) = world.double.pushes
    assert push.identity.login == "alice" and not world.asks()


def test_after_revocation_the_next_rebase_asks_again(world: World) -> None:
    world.sign_in("alice")
    world.double.oauth.revoke("alice")
    response = deliver(
        world.client, "github_app_authorization", authorization_revoked(world.double, "alice")
    )
    assert response.status_code == 202 and world.accounts() == []
    job_id = world.comment("/agent rebase", "alice")
    job = world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION, *TERMINAL_STATES))
    assert job.state == JobState.WAITING_FOR_AUTHORIZATION, (job.result, world.worker.output())
    (ask,) = world.asks()
    assert "@alice" in ask.body and "/oauth/login" in ask.body and not world.double.pushes
    world.sign_in("alice")
    assert world.wait(job_id).state == JobState.SUCCEEDED
    assert [p.identity.login for p in world.double.pushes] == ["alice"]


def test_a_revocation_found_on_push_forgets_the_token_and_asks_again(world: World) -> None:
    world.sign_in("alice")
    world.double.oauth.revoke("alice")  # and its webhook never arrives
    job_id = world.comment("/agent rebase", "alice")
    job = world.wait(job_id, (JobState.WAITING_FOR_AUTHORIZATION, *TERMINAL_STATES))
    assert job.state == JobState.WAITING_FOR_AUTHORIZATION, (job.result, world.worker.output())
    assert [s["name"] for s in job.steps][-1] == "push" and world.accounts() == []
    (ask,) = world.asks()
    assert "@alice" in ask.body and "/oauth/login" in ask.body and not world.double.pushes
    world.sign_in("alice")
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    assert [p.identity.login for p in world.double.pushes] == ["alice"]
    assert len(world.bot_comments()) == 1


def test_a_fork_without_maintainer_edits_gets_a_patch(world: World) -> None:
    world.sign_in("alice")
    number = world.fork_pull(maintainer_can_modify=False)
    head = world.double.branch_sha(FORK, "patch")
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "patch", job.result
    assert not world.double.pushes and world.double.branch_sha(FORK, "patch") == head
    (result,) = world.user_comments("alice", number)
    assert "git am" in result.body and "Subject: [PATCH] Add patch" in result.body


def test_a_fork_with_maintainer_edits_is_pushed_to_the_fork(world: World) -> None:
    world.sign_in("alice")
    number = world.fork_pull(maintainer_can_modify=True)
    old = world.double.branch_sha(FORK, "patch")
    job = world.wait(world.comment("/agent rebase", "alice", number))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "pushed", job.result
    push, backup = world.double.pushes  # the old head is kept in this repository after it
    assert (push.repo, push.identity.login) == (FORK, "alice") and backup.repo == REPO
    assert [(u.ref, u.old) for u in push.updates] == [("refs/heads/patch", old)]
    main, new = world.double.branch_sha(REPO, "main"), world.double.branch_sha(FORK, "patch")
    assert git(world.double, "merge-base", "--is-ancestor", str(main), str(new), repo=FORK) == ""


# Below the built-in `write` only where the organisation allows it.
@pytest.mark.parametrize("world", ["trigger_permission: triage\n"], indirect=True)
def test_a_fork_that_refuses_the_persons_push_gets_a_patch(world: World) -> None:
    # erin may trigger here (triage) but may not write, so the fork is not hers to edit
    world.double.commit(REPO, "main", {".github/onloop.yml": "trigger_permission: triage\n"})
    world.double.set_permission(REPO, "erin", "triage")
    world.sign_in("erin")
    number = world.fork_pull(maintainer_can_modify=True)
    job = world.wait(world.comment("/agent rebase", "erin", number))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "patch", job.result
    assert not world.double.pushes
    (result,) = world.user_comments("erin", number)
    assert "git am" in result.body


# A setup that plants a git hook making the rebased branch hold more than the PR's commits.
# A rebase runs no setup (it would run the PR head's code), so the hook is never there; the
# replay check behind it is tests/integration/test_guard.py's.
HOOKS = {
    "an extra commit": "echo evil > evil.txt; git add evil.txt; git commit -q -m evil",
    # an amend runs post-rewrite again: once is enough
    "a changed commit": "test -e .git/amended || { touch .git/amended; echo evil >> feature.py; "
    "git commit -q -a --amend --no-edit; }",
}


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_a_rebase_runs_none_of_the_repositorys_code(world: World, hook: str) -> None:
    script = f"#!/bin/sh\\n{HOOKS[hook]}\\n"
    setup = f"printf '{script}' > .git/hooks/post-rewrite && chmod +x .git/hooks/post-rewrite"
    setup += f"  # {uuid.uuid4().hex}: a setup no snapshot has, so it would run here"
    config = "sandbox:\n  setup: |\n    " + setup + "\n"
    world.double.commit(REPO, "main", {".github/onloop.yml": config}, message="Setup")
    authorize(world.db, world.double, "alice")
    head = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "pushed", job.result
    new = world.double.branch_sha(REPO, "feature")
    assert new != head and len(world.double.pushes) == 1
    main = world.double.branch_sha(REPO, "main")
    subjects = git(world.double, "log", "--format=%s", f"{main}..{new}").splitlines()
    theirs = git(world.double, "log", "--format=%s", f"{main}...{head}", "--right-only")
    assert subjects == theirs.splitlines() and "evil" not in subjects
    assert "evil" not in git(world.double, "show", f"{new}:feature.py")
    assert git(world.double, "cat-file", "-e", f"{new}:evil.txt").startswith("!")


def test_a_second_rebase_after_the_base_moved_again_is_pushed(world: World) -> None:
    """The head is in the mirror from the first rebase; the new base tip is not, yet."""
    authorize(world.db, world.double, "alice")
    first = world.wait(world.comment("/agent rebase", "alice"))
    assert first.state == JobState.SUCCEEDED, (first.result, first.steps)
    world.double.commit(REPO, "main", {"lib.py": "A = 3\n"}, message="Move main again")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    main, head = (world.double.branch_sha(REPO, b) for b in ("main", "feature"))
    assert git(world.double, "merge-base", "--is-ancestor", str(main), str(head)) == ""
    assert git(world.double, "diff", "--name-only", f"{main}..{head}") == "feature.py"
