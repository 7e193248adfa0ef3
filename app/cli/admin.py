"""Operator commands: `onloop pause`, `onloop resume` (the kill switch) and `onloop audit`."""

from __future__ import annotations

import getpass
import json

import click

from app.cli.common import migrated_database, parse_since
from app.policy import governance
from app.policy.governance import INSTALLATION, REPO
from app.store import audit as log


def _operator() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "operator"


def _targets(repo: str | None, installation: int | None) -> list[tuple[str, str]]:
    targets = [(REPO, repo)] if repo else []
    if installation is not None:
        targets.append((INSTALLATION, str(installation)))
    return targets


@click.command()
@click.argument("repo", required=False)
@click.option("--installation", type=int, default=None, help="pause a whole installation (id)")
@click.option("--reason", default=None, help="shown to people whose work is refused")
@click.option("--by", default=None, help="who pauses (default: the local user)")
def pause(repo: str | None, installation: int | None, reason: str | None, by: str | None) -> None:
    """Stop onloop starting work on REPO (owner/name) or an installation; no REPO: list pauses."""
    db = migrated_database()
    try:
        targets = _targets(repo, installation)
        if not targets:
            rows = governance.pauses(db)
            for row in rows:
                why = f"  {row.reason}" if row.reason else ""
                click.echo(f"{row.scope} {row.target}  by {row.paused_by or '-'}{why}")
            if not rows:
                click.echo("nothing is paused")
            return
        for scope, target in targets:
            try:
                governance.pause(db, scope, target, reason=reason, by=by or _operator())
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
            click.echo(f"paused {scope} {target}")
    finally:
        db.dispose()


@click.command()
@click.argument("repo", required=False)
@click.option("--installation", type=int, default=None, help="resume a whole installation (id)")
@click.option("--by", default=None, help="who resumes (default: the local user)")
def resume(repo: str | None, installation: int | None, by: str | None) -> None:
    """Let onloop start work on REPO (owner/name) or an installation again."""
    targets = _targets(repo, installation)
    if not targets:
        raise click.UsageError("name a repository (owner/name) or --installation ID")
    db = migrated_database()
    try:
        for scope, target in targets:
            try:
                lifted = governance.resume(db, scope, target, by=by or _operator())
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
            click.echo(
                f"resumed {scope} {target}" if lifted else f"{scope} {target} was not paused"
            )
    finally:
        db.dispose()


@click.command()
@click.option("--repo", default=None, help="owner/name")
@click.option("--since", default="24h", show_default=True, help="how far back: 30m, 24h, 7d")
@click.option("--job", "job_id", type=int, default=None, help="one job's entries")
@click.option("--action", default=None, help="one action, e.g. github.write")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
def audit(
    repo: str | None, since: str, job_id: int | None, action: str | None, as_json: bool
) -> None:
    """Print the audit log: every decision and action, oldest first."""
    start = parse_since(since)
    db = migrated_database()
    try:
        rows = log.entries(db, repo=repo, since=start, job_id=job_id, action=action)
    finally:
        db.dispose()
    for row in rows:
        click.echo(json.dumps(log.as_dict(row)) if as_json else log.format_entry(row))
    if not rows and not as_json:
        click.echo("no audit entries match", err=True)
