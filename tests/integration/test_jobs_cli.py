"""`onloop jobs`, run as a real process: recent jobs, and today's spend against budget."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from app.core.kinds import Kind
from app.policy.budgets import add_usage
from app.store.db import Database
from app.store.models import Job, JobState
from tests.integration.test_cli import clean_env, onloop


def add_job(db: Database, repo: str, state: str, outcome: str | None = None) -> int:
    with db.transaction() as s:
        row = Job(
            kind=Kind.FIX_ISSUE,
            repo=repo,
            installation_id=7,
            number=3,
            requested_by="carol",
            state=state,
            started_at=datetime.now(UTC),
            result={"outcome": outcome} if outcome else {},
        )
        s.add(row)
        s.flush()
        return row.id


def test_jobs_lists_recent_jobs_and_todays_spend_against_budget(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    stopped = add_job(db, "octo/widgets", JobState.FAILED, "budget_reached")
    add_usage(db, stopped, tokens_in=900, tokens_out=300, cost_usd=0.12, sandbox_seconds=120)
    done = add_job(db, "octo/widgets", JobState.SUCCEEDED)
    add_job(db, "octo/gadgets", JobState.SUCCEEDED)
    org = tmp_path / "org.yml"
    org.write_text("budgets:\n  agent_tokens: 1000\n  jobs: 5\n")
    env = clean_env(ONLOOP_DATABASE_URL=database_url, ONLOOP_CONFIG_FILE=str(org))

    result = onloop(["jobs", "--repo", "octo/widgets", "--json"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [j["id"] for j in data["jobs"]] == [done, stopped]  # newest first, one repository
    assert data["jobs"][1]["outcome"] == "budget_reached"
    assert data["jobs"][1]["agent_tokens"] == 1200 and data["jobs"][1]["sandbox_minutes"] == 2
    (repo, installation) = data["budgets"]
    assert (repo["scope"], repo["name"]) == ("repository", "octo/widgets")
    assert repo["agent_tokens"] == {"spent": 1200, "limit": 1000}
    assert repo["jobs"] == {"spent": 2, "limit": 5}
    assert installation["name"] == "7" and installation["jobs"]["limit"] is None

    text = onloop(["jobs", "--state", "failed", "--limit", "5"], tmp_path, env)
    assert text.returncode == 0, text.stderr
    (line,) = [ln for ln in text.stdout.splitlines() if ln.strip().startswith(str(stopped))]
    assert "budget_reached" in line and "tokens 1200" in line
    assert "repository octo/widgets: agent_tokens 1200/1000" in text.stdout
    assert "repository octo/gadgets: agent_tokens 0/1000" in text.stdout


def test_jobs_show_prints_one_job_with_its_steps(
    db: Database, database_url: str, tmp_path: Path
) -> None:
    job_id = add_job(db, "octo/widgets", JobState.FAILED, "budget_reached")
    policy = {"name": "policy", "kind": "deterministic", "state": "succeeded", "duration": 0.2}
    agent = {"name": "agent", "kind": "agent", "state": "failed", "duration": 12.5}
    steps = [policy, agent | {"error": "out of tokens"}]
    with db.transaction() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.steps = steps
        row.result = {"outcome": "budget_reached", "error": "the daily agent_tokens budget"}
    env = clean_env(ONLOOP_DATABASE_URL=database_url)
    text = onloop(["jobs", "show", str(job_id)], tmp_path, env)
    assert text.returncode == 0, text.stderr
    assert f"job {job_id}: fix_issue on octo/widgets#3, asked by carol" in text.stdout
    assert "  - policy (deterministic): succeeded, 0.2 s" in text.stdout
    assert "  - agent (agent): failed, 12.5 s: out of tokens" in text.stdout
    assert "error: the daily agent_tokens budget" in text.stdout
    shown = json.loads(onloop(["jobs", "show", str(job_id), "--json"], tmp_path, env).stdout)
    assert shown["id"] == job_id and [s["name"] for s in shown["steps"]] == ["policy", "agent"]
    missing = onloop(["jobs", "show", "999999"], tmp_path, env)
    assert missing.returncode == 1 and "no job 999999" in missing.stderr
