"""A job the caps hold back: 👀 on its command at once, and one status comment that says where
it waits, edited as its place changes. Real database, PyGithub and the GitHub double."""

from __future__ import annotations

from pathlib import Path

from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.feedback import listeners as feedback
from tasks.feedback.access import Access
from tasks.runner.context import JobContext
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for

REPO = "octo/widgets"


def test_a_queued_job_reacts_and_says_where_it_waits(
    github_double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "widgets\n"})
    double.create_branch(REPO, "more")
    double.commit(REPO, "more", {"more.py": "X = 1\n"})
    number = double.create_pull(REPO, "more", user="alice").number
    asked = double.add_comment(REPO, number, "/agent review", "alice")
    installation = double.installation_for(double.repo(REPO))
    assert installation is not None
    job = Job(
        id=41,
        kind="review_pr",
        repo=REPO,
        number=number,
        installation_id=installation.id,
        requested_by="alice",
        params={"comment_id": asked.id},
        steps=[],
    )
    github = GitHubApp.for_settings(settings_for(double, tmp_path, database_url=database_url))
    ctx = JobContext(github.settings, db, job, github, github.meter)
    bot = double.app.bot_login

    feedback.queued(ctx, "3 jobs already run in octo/widgets", 2)
    assert [(r.content, r.user) for r in asked.reactions] == [("eyes", bot)]
    (status,) = [c for c in double.comments(REPO, number) if c.user == bot]
    assert "<!-- onloop:job-41-status -->" in status.body and "**Queued**" in status.body
    assert "number 2 in line" in status.body and "`/agent cancel`" in status.body
    page = f"{github.settings.public_url.rstrip('/')}/jobs/41"
    assert f"([job #41]({page}))" in status.body  # the job's page on onloop

    feedback.queued(ctx, "3 jobs already run in octo/widgets", 1)
    assert [(r.content, r.user) for r in asked.reactions] == [("eyes", bot)]  # not twice
    (again,) = [c for c in double.comments(REPO, number) if c.user == bot]
    assert again.id == status.id and "number 1 in line" in again.body
    # Refused in silence later (an outsider told once already): the "queued" status goes.
    status_listener = feedback.StatusComment(ctx, Access(ctx))
    status_listener.finished(ctx, JobState.FAILED, {"outcome": "refused", "quiet": True})
    assert [c for c in double.comments(REPO, number) if c.user == bot] == []
