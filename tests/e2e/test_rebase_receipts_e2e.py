"""Rebase receipts end to end: the status comment's restore command, run in a real clone of
the GitHub double's repository, puts the old head back; the backup ref and the range-diff."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from app.github.clients import GitHubApp
from app.store.models import Job, JobState, utcnow
from tasks.queue import backups
from tests.doubles.github.double import GitHubDouble
from tests.doubles.markdown import code_blocks, outside_code
from tests.e2e.test_rebase_e2e import FORK, REPO, World, authorize, git
from tests.e2e.test_rebase_e2e import world as world  # the fixture

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def clone(double: GitHubDouble, login: str, where: Path) -> Path:
    """A person's own clone of REPO over the double's smart HTTP, with their token."""
    token = double.issue_user_token(login)
    url = double.clone_url(REPO).replace("://", f"://x-access-token:{token}@", 1)
    run(["git", "clone", "--quiet", url, str(where)], where.parent)
    return where


def run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def restore_script(body: str) -> str:
    (script,) = [b for b in code_blocks(body) if "git push --force-with-lease" in b]
    return script


def test_the_receipts_restore_command_puts_the_old_head_back(world: World, tmp_path: Path) -> None:
    authorize(world.db, world.double, "alice")
    old = world.double.branch_sha(REPO, "feature")
    job_id = world.comment("/agent rebase", "alice")
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    new = world.double.branch_sha(REPO, "feature")
    backup = f"refs/onloop/backup/feature/{job_id}"
    assert new != old and git(world.double, "rev-parse", backup) == old
    (push,) = world.double.pushes  # the branch and its backup: one atomic push, as alice
    assert push.identity.login == "alice"
    assert [(u.ref, u.old, u.new) for u in push.updates] == [
        ("refs/heads/feature", old, new),
        (backup, None, old),
    ]
    (result,) = world.user_comments("alice")
    assert f"`{old}`" in result.body and f"`{new}`" in result.body and "for 30 days" in result.body
    (folded,) = [b for b in code_blocks(result.body) if b.startswith("1:  ")]
    assert " = 1:  " in folded and "Add feature" in folded  # the commit, replayed unchanged
    assert "<summary>git range-diff" in outside_code(result.body)

    mine = clone(world.double, "alice", tmp_path / "mine")
    for line in restore_script(result.body).splitlines():
        run(["sh", "-c", line], mine)
    assert world.double.branch_sha(REPO, "feature") == old
    assert world.double.pushes[-1].identity.login == "alice"
    assert [(u.ref, u.old, u.new) for u in world.double.pushes[-1].updates] == [
        ("refs/heads/feature", new, old)
    ]


def test_the_restore_command_refuses_when_the_branch_moved_on(world: World, tmp_path: Path) -> None:
    """The lease in the restore command: somebody's later push is never overwritten."""
    authorize(world.db, world.double, "alice")
    job = world.wait(world.comment("/agent rebase", "alice"))
    assert job.state == JobState.SUCCEEDED, (job.result, world.worker.output())
    world.double.commit(REPO, "feature", {"later.py": "L = 1\n"}, message="Later work")
    later = world.double.branch_sha(REPO, "feature")
    (result,) = world.user_comments("alice")
    mine = clone(world.double, "alice", tmp_path / "mine")
    fetch, push = restore_script(result.body).splitlines()
    run(["sh", "-c", fetch], mine)
    refused = subprocess.run(["sh", "-c", push], cwd=mine, capture_output=True, text=True)
    assert refused.returncode != 0 and "stale info" in refused.stderr
    assert world.double.branch_sha(REPO, "feature") == later


def test_a_forks_old_head_is_kept_in_the_base_repository(world: World) -> None:
    world.sign_in("alice")
    number = world.fork_pull(maintainer_can_modify=True)
    old = world.double.branch_sha(FORK, "patch")
    job_id = world.comment("/agent rebase", "alice", number)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "pushed", job.result
    to_fork, backup = world.double.pushes
    assert (to_fork.repo, backup.repo) == (FORK, REPO)
    ref = f"refs/onloop/backup/patch/{job_id}"
    assert [(u.ref, u.new) for u in backup.updates] == [(ref, old)]
    assert backup.identity.login == "alice"
    (result,) = world.user_comments("alice", number)
    fetch, push = restore_script(result.body).splitlines()
    assert fetch == f"git fetch {world.double.clone_url(REPO)} {ref}"
    new = world.double.branch_sha(FORK, "patch")
    fork = world.double.clone_url(FORK)
    assert push == f"git push --force-with-lease=patch:{new} {fork} {old}:patch"


@pytest.mark.parametrize("world", ["backup_days: 7\n"], indirect=True)
def test_the_beats_purge_deletes_an_expired_backup_and_keeps_a_fresh_one(world: World) -> None:
    """`backup_days` from the organisation file; a job's age is its time in the database."""
    authorize(world.db, world.double, "alice")
    world.double.create_branch(REPO, "second", "feature")
    number = world.double.create_pull(REPO, "second", title="Second", user="alice").number
    old_id = world.comment("/agent rebase", "alice")
    assert world.wait(old_id).state == JobState.SUCCEEDED, world.worker.output()
    fresh_id = world.comment("/agent rebase", "alice", number)
    assert world.wait(fresh_id).state == JobState.SUCCEEDED, world.worker.output()
    stranger = "refs/onloop/backup/other/999999"  # a job this database does not know
    main = str(world.double.branch_sha(REPO, "main"))
    assert git(world.double, "update-ref", stranger, main) == ""
    with world.db.transaction() as s:  # the first rebase was eight days ago
        eight_days_ago = utcnow() - timedelta(days=8)
        s.execute(update(Job).where(Job.id == old_id).values(finished_at=eight_days_ago))

    github = GitHubApp.for_settings(world.settings)
    expired = f"refs/onloop/backup/feature/{old_id}"
    assert backups.sweep(world.settings, github, world.db) == [f"{REPO}:{expired}"]
    left = git(world.double, "for-each-ref", "--format=%(refname)", "refs/onloop/backup/")
    assert left.splitlines() == [stranger, f"refs/onloop/backup/second/{fresh_id}"]
    assert world.job(old_id).result["backup_purged"] == "deleted"
    (deletion,) = world.double.calls("DELETE", f"/repos/{REPO}/git/refs/")
    assert deletion.identity.kind == "installation" and deletion.status == 204

    assert backups.sweep(world.settings, github, world.db) == []  # settled: not listed again
    assert len(world.double.calls("GET", f"/repos/{REPO}/git/matching-refs/")) == 1
