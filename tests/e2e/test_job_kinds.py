"""Each job kind is declared once: a row in app.core.kinds.KINDS and a runner in
tasks.worker.RUNNERS. A kind added through those two tables alone is routed and run."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.core.kinds import KINDS, KindSpec
from app.core.settings import Settings
from app.store.db import Database
from app.store.models import Job, JobState
from app.web import create_app
from tasks.blueprints.replies import reply, repository
from tasks.runner.context import JobContext
from tasks.worker import RUNNERS, Worker
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.payloads import pr_comment
from tests.doubles.webhooks import deliver

REPO = "octo/widgets"


def test_every_kind_has_one_runner_and_every_runner_a_kind() -> None:
    assert set(RUNNERS) == set(KINDS)
    assert all(spec.kind == kind for kind, spec in KINDS.items())


def test_a_kind_added_through_the_two_tables_is_routed_and_run(
    github_double: GitHubDouble, database_url: str, db: Database, tmp_path: Any
) -> None:
    github_double.create_repo(REPO, files={"README.md": "hi\n"})
    github_double.install(REPO)
    github_double.create_issue(REPO, "A thread to answer on")  # #1: a PR is an issue too
    settings: Settings = settings_for(github_double, tmp_path, database_url=database_url)
    seen: list[str] = []

    def run_shout(ctx: JobContext) -> dict[str, Any]:
        seen.append(ctx.job.kind)
        loud = str(ctx.params.get("args", "")).upper()
        # With the installation token its row's permissions mint (issues: write, as for
        # every kind by default), as any reply does.
        reply(ctx, repository(ctx), f"{loud}!")
        return {"shouted": loud}

    kinds = {**KINDS, "shout": KindSpec("shout", verb="shout", sandboxed=False)}
    runners = {**RUNNERS, "shout": run_shout}

    def comment() -> dict[str, Any]:
        return pr_comment(github_double, REPO, 1, "/agent shout hello there")

    # Without its row in the table, the verb is unknown: the person gets help.
    plain = create_app(settings, db=db).test_client()
    response = deliver(plain, "issue_comment", comment())
    assert response.status_code == 202 and response.get_json()["outcome"] == "help"

    client = create_app(settings, db=db, kinds=kinds).test_client()
    response = deliver(client, "issue_comment", comment())
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["outcome"] == "shout"
    (job_id,) = response.get_json()["jobs"]

    # Not sandboxed in its row: each comment asking for it is a job of its own, as for help.
    again = deliver(client, "issue_comment", comment())
    assert again.get_json()["outcome"] == "shout" and again.get_json()["jobs"] != [job_id]

    worker = Worker(settings, db=db, runners=runners, listeners=lambda ctx: [], kinds=kinds)
    assert worker.jobs.run(job_id) == JobState.SUCCEEDED
    assert seen == ["shout"]
    with db.read() as s:
        job = s.scalar(select(Job).where(Job.id == job_id))
    assert job is not None and job.kind == "shout"
    assert job.result == {"shouted": "HELLO THERE"}
    bodies = [c.body for c in github_double.comments(REPO, 1)]
    assert any("HELLO THERE!" in body for body in bodies)
