"""The feedback's own installation token is narrowed to the job's repository and to what
feedback writes (comments, reactions, check runs): it can never read or push the code.
Real database, PyGithub and the GitHub double, which enforces the token's permissions."""

from __future__ import annotations

from pathlib import Path

import requests

from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Job, JobState
from tasks.feedback import listeners as feedback
from tasks.runner.context import JobContext
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for

REPO, OTHER = "octo/widgets", "octo/gadgets"
FEEDBACK = {"metadata": "read", "issues": "write", "checks": "write"}


def test_feedback_asks_for_one_repository_and_only_what_it_writes(
    github_double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "widgets\n"})
    double.create_repo(OTHER, files={"README.md": "gadgets\n"})
    double.create_branch(REPO, "more")
    double.commit(REPO, "more", {"more.py": "X = 1\n"})
    number = double.create_pull(REPO, "more", user="alice").number
    asked = double.add_comment(REPO, number, "/agent review", "alice")
    installation = double.installation_for(double.repo(REPO))
    assert installation is not None
    job = Job(
        id=42,
        kind="review_pr",
        repo=REPO,
        number=number,
        installation_id=installation.id,
        requested_by="alice",
        params={"comment_id": asked.id},
        steps=[],
        state=JobState.RUNNING,
    )
    with db.transaction() as s:  # running, so that its steps are recorded
        s.add(job)
    with db.read() as s:
        job = s.get(Job, 42)
        assert job is not None
        s.expunge(job)
    github = GitHubApp.for_settings(settings_for(double, tmp_path, database_url=database_url))
    ctx = JobContext(github.settings, db, job, github, github.meter)
    ctx.head_sha = double.branch_sha(REPO, "more")

    ctx.listeners = feedback.listeners_for(ctx)  # 👀, then the status comment and check run
    for name in ("policy", "authorization", "lint"):
        with ctx.step(name) as step:
            step.output = f"{name} ran"
    ctx.tell("finished", JobState.SUCCEEDED, {"comments": 0})

    bot = double.app.bot_login
    assert [(r.content, r.user) for r in asked.reactions] == [("eyes", bot)]
    (status,) = [c for c in double.comments(REPO, number) if c.user == bot]
    assert "**Done**" in status.body
    (run,) = double.checks.for_commit(REPO, str(ctx.head_sha))
    assert run.name == "onloop/review_pr" and run.status == "completed"
    minted = double.calls("POST", f"/app/installations/{installation.id}/access_tokens")
    assert minted and all(
        call.json == {"repositories": ["widgets"], "permissions": FEEDBACK} for call in minted
    )
    used = [c for c in double.calls(surface="api") if c.identity.kind == "installation"]
    assert used and all(c.status < 400 for c in used), [(c.path, c.status) for c in used]

    # What else that token could do: nothing with the code, nothing in another repository.
    (token,) = {c.identity.token.value for c in used if c.identity.token is not None}
    api = requests.Session()
    api.headers["Authorization"] = f"token {token}"
    base = f"{double.api_url}/repos"
    assert api.get(f"{base}/{REPO}/contents/README.md", timeout=10).status_code == 403
    assert api.get(f"{base}/{REPO}/git/refs/heads/more", timeout=10).status_code in (403, 404)
    assert api.get(f"{base}/{OTHER}/issues", timeout=10).status_code == 404
    pulls = api.post(f"{base}/{REPO}/pulls", json={"head": "more", "base": "main"}, timeout=10)
    assert pulls.status_code == 403
