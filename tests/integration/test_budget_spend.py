"""Today's spend, read from the jobs table (SQLite or PostgreSQL), and the budget gauges on
/metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.core.kinds import SANDBOXED, Kind
from app.core.settings import Settings
from app.policy.budget_report import report
from app.policy.budgets import OVER_BUDGET, Scope, Spend, add_usage, spend
from app.store.db import Database
from app.store.models import Job, JobState, RepoConfigCache
from app.web import create_app

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def job(
    db: Database,
    repo: str = "octo/widgets",
    *,
    kind: str = Kind.FIX_ISSUE,
    started: datetime | None = NOW,
    installation: int = 7,
    outcome: str | None = None,
) -> int:
    with db.transaction() as s:
        row = Job(
            kind=kind,
            repo=repo,
            installation_id=installation,
            number=1,
            requested_by="carol",
            state=JobState.FAILED if outcome else JobState.SUCCEEDED,
            started_at=started,
            result={"outcome": outcome} if outcome else {},
        )
        s.add(row)
        s.flush()
        return row.id


def test_todays_spend_of_a_repository_and_an_installation(db: Database) -> None:
    first = job(db)
    add_usage(db, first, tokens_in=900, tokens_out=300, cost_usd=0.5, sandbox_seconds=90)
    add_usage(db, first, tokens_in=100, sandbox_seconds=30)  # a second step adds to it
    other = job(db, "octo/gadgets")
    add_usage(db, other, tokens_in=5, cost_usd=0.25)
    yesterday = job(db, started=NOW - timedelta(days=1))
    add_usage(db, yesterday, tokens_in=10_000)
    job(db, outcome=OVER_BUDGET)  # refused before it started: not a job of the day
    job(db, kind=Kind.HELP)  # answers spend nothing
    job(db, started=None)  # still queued
    job(db, installation=8)

    mine = spend(db, SANDBOXED, repo="octo/widgets", now=NOW)
    assert mine == Spend(agent_tokens=1300, cost_usd=0.5, sandbox_minutes=2.0, jobs=2)
    assert spend(db, SANDBOXED, repo="octo/widgets", now=NOW, exclude=first).jobs == 1
    whole = spend(db, SANDBOXED, installation_id=7, now=NOW)
    assert whole == Spend(agent_tokens=1305, cost_usd=0.75, sandbox_minutes=2.0, jobs=2)
    tomorrow = spend(db, SANDBOXED, repo="octo/widgets", now=NOW + timedelta(days=1))
    assert tomorrow == Spend()  # the day resets at 00:00 UTC


def test_report_and_metrics_show_spend_against_the_effective_limits(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    org = tmp_path / "org.yml"
    org.write_text("budgets:\n  agent_tokens: 1000\n  installation:\n    jobs: 10\n")
    settings = settings.model_copy(update={"config_file": org})
    with db.transaction() as s:  # the repository lowers its budget
        s.add(RepoConfigCache(repo="octo/widgets", text="budgets:\n  agent_tokens: 400\n"))
    first = job(db, started=datetime.now(UTC))
    add_usage(db, first, tokens_in=250)
    rows = {(r.scope, r.name): r for r in report(db, settings, SANDBOXED)}
    repo = rows[(Scope.REPOSITORY, "octo/widgets")]
    assert repo.spent.agent_tokens == 250 and repo.limits.agent_tokens == 400
    assert rows[(Scope.INSTALLATION, "7")].limits.jobs == 10

    text = create_app(settings, db=db).test_client().get("/metrics").get_data(as_text=True)
    spent = 'onloop_budget_spent{budget="agent_tokens",name="octo/widgets",scope="repository"}'
    limit = 'onloop_budget_limit{budget="agent_tokens",name="octo/widgets",scope="repository"}'
    assert f"{spent} 250.0" in text and f"{limit} 400.0" in text
    assert 'onloop_budget_limit{budget="jobs",name="7",scope="installation"} 10.0' in text
