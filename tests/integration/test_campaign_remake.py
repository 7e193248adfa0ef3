"""A campaign job run by a real worker in-process (the local sandbox): its PR opened in the
owner's name, then made again on the new base when a push to main conflicts with it; the
same PR, one head, mergeable again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.crypto import TokenBox
from app.github.user_tokens import TokenPair, store
from app.store import campaigns
from app.store.db import Database
from app.store.fleet_tables import RepoState
from app.store.models import Job, JobState
from tasks.queue import campaign_ops
from tasks.worker import Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import SECRET_KEY, settings_for

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="the local sandbox needs bwrap")
REPO = "octo/lib"
FILE = """\
name: bump
owner: alice
repositories: [octo/lib]
change:
  run: ["sed -i 's/1.0/1.1/' version.py"]
issue_repository: octo/meta
"""


def queued_jobs(db: Database) -> list[int]:
    with db.read() as s:
        return list(s.scalars(select(Job.id).where(Job.state == JobState.QUEUED)))


def test_a_conflicted_pr_is_made_again_on_its_new_base(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo("octo/meta")
    double.create_repo(REPO, files={"version.py": 'VERSION = "1.0"\nNAME = "lib"\n'})
    double.set_permission(REPO, "alice", "write")
    redis_url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    settings = settings_for(
        double,
        tmp_path,
        database_url=database_url,
        redis_url=redis_url,
        work_dir=tmp_path / "work",
        sandbox_backend="local",
    )
    db = Database(database_url)
    user = double.user("alice")
    store(
        db,
        TokenBox(SECRET_KEY),
        user.id,
        "alice",
        TokenPair(double.issue_user_token("alice"), None, None, None),
    )
    worker = Worker(settings, db=db)
    try:
        campaign_ops.start(worker.campaigns, FILE)
        (first,) = queued_jobs(db)
        assert worker.jobs.run(first) == JobState.SUCCEEDED  # its end wakes the campaign
        (row,) = campaigns.repos(db, 1)
        assert row.state == RepoState.PR_OPEN and row.pr_number is not None
        (pr,) = [i for i in double.repo(REPO).issues.values() if i.pull]
        assert pr.user == "alice" and pr.pull is not None
        old_head = pr.pull.head_sha
        # main moves so that the PR conflicts with it
        double.commit(REPO, "main", {"version.py": 'VERSION = "1.0"\nNAME = "library"\n'})
        double.commit(REPO, "main", {"version.py": 'VERSION = "1.0-rc"\nNAME = "library"\n'})
        worker.campaigns.wake(1)
        (again,) = queued_jobs(db)
        assert worker.jobs.run(again) == JobState.SUCCEEDED
        (row,) = campaigns.repos(db, 1)
        assert row.state == RepoState.PR_OPEN and row.pr_number == pr.number
        assert [i.number for i in double.repo(REPO).issues.values() if i.pull] == [pr.number]
        new_head = double.branch_sha(REPO, "onloop/campaign-bump")
        assert new_head != old_head
        worker.campaigns.wake(1)  # mergeable now: nothing more starts
        assert queued_jobs(db) == []
        assert all(p.identity.login == "alice" for p in double.pushes)
    finally:
        worker.close()
