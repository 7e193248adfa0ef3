"""`onloop jobs`: recent jobs, and today's spend against budget; `onloop jobs show ID`: one job."""

from __future__ import annotations

import json
from typing import Any

import click
from sqlalchemy import select

from app.cli.common import check_migrated, settings_or_exit
from app.core.kinds import SANDBOXED
from app.policy.budget_report import Row, report
from app.policy.budgets import Budget
from app.policy.repo_config import ConfigError
from app.store.db import Database
from app.store.models import Job


def _job(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "repo": job.repo,
        "number": job.number,
        "state": job.state,
        "outcome": (job.result or {}).get("outcome"),
        "requested_by": job.requested_by,
        "created_at": job.created_at.isoformat() if job.created_at else None,
        "agent_tokens": (job.agent_tokens_in or 0) + (job.agent_tokens_out or 0),
        "cost_usd": round(job.cost_usd or 0.0, 4),
        "sandbox_minutes": round((job.sandbox_seconds or 0.0) / 60, 2),
    }


def _budget(row: Row) -> dict[str, Any]:
    return {
        "scope": row.scope.value,
        "name": row.name,
        **{b.value: {"spent": row.spent.of(b), "limit": row.limit(b)} for b in Budget},
    }


def _line(row: dict[str, Any]) -> str:
    parts = []
    for budget in Budget:
        spent, limit = row[budget.value]["spent"], row[budget.value]["limit"]
        parts.append(f"{budget.value} {spent:g}/{'-' if limit is None else f'{limit:g}'}")
    return f"{row['scope']} {row['name']}: " + ", ".join(parts)


@click.group(invoke_without_command=True)
@click.option("--repo", default=None, help="owner/name")
@click.option("--state", default=None, help="one state, e.g. running or failed")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
@click.pass_context
def jobs(
    ctx: click.Context, repo: str | None, state: str | None, limit: int, as_json: bool
) -> None:
    """List recent jobs, newest first, and today's (UTC) spend against each daily budget."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_or_exit()
    check_migrated(settings)
    db = Database(settings.database_url)
    try:
        query = select(Job).order_by(Job.id.desc()).limit(limit)
        if repo is not None:
            query = query.where(Job.repo == repo)
        if state is not None:
            query = query.where(Job.state == state)
        with db.read() as s:
            listed = [_job(job) for job in s.scalars(query)]
        try:
            budgets = [_budget(row) for row in report(db, settings, SANDBOXED, repo=repo)]
        except ConfigError as exc:
            raise click.ClickException(f"the organisation file is not usable: {exc}") from None
    finally:
        db.dispose()
    if as_json:
        click.echo(json.dumps({"jobs": listed, "budgets": budgets}))
        return
    for job in listed:
        where = f"{job['repo']}#{job['number']}" if job["number"] else job["repo"]
        click.echo(
            f"{job['id']:>6} {job['kind']:<10} {job['state']:<26} {where} "
            f"{job['outcome'] or '-'}  tokens {job['agent_tokens']}, "
            f"${job['cost_usd']:g}, {job['sandbox_minutes']:g} min"
        )
    if not listed:
        click.echo("no jobs match", err=True)
    click.echo("today's spend / daily budget (UTC):")
    for row in budgets:
        click.echo("  " + _line(row))
    if not budgets:
        click.echo("  nothing spent today")


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def show(job_id: int, as_json: bool) -> None:
    """One job: what it was, who asked, its steps with their durations, and its result."""
    settings = settings_or_exit()
    check_migrated(settings)
    db = Database(settings.database_url)
    try:
        with db.read() as s:
            job = s.get(Job, job_id)
            if job is None:
                raise click.ClickException(f"no job {job_id}")
            shown = _job(job) | {"steps": list(job.steps or []), "result": job.result or {}}
    finally:
        db.dispose()
    if as_json:
        click.echo(json.dumps(shown, default=str))
        return
    where = f"{shown['repo']}#{shown['number']}" if shown["number"] else shown["repo"]
    click.echo(f"job {job_id}: {shown['kind']} on {where}, asked by {shown['requested_by']}")
    click.echo(f"  state {shown['state']}, outcome {shown['outcome'] or '-'}")
    for step in shown["steps"]:
        took = step.get("duration")
        line = f"  - {step.get('name')} ({step.get('kind')}): {step.get('state')}"
        line += f", {took:.1f} s" if isinstance(took, int | float) else ""
        click.echo(line + (f": {step['error']}" if step.get("error") else ""))
    error = shown["result"].get("error")
    if error:
        click.echo(f"  error: {error}")
