"""`onloop campaign`: start a campaign from its file, follow it, pause, resume, cancel, close."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.common import check_migrated, settings_or_exit
from app.core.settings import REQUIRED_FOR_SERVICE

if TYPE_CHECKING:
    from tasks.queue.campaigns import Coordinator


@contextmanager
def _coordinator() -> Iterator[Coordinator]:
    """The CLI's own coordinator (the database and the GitHub App of the settings); errors a
    person can act on exit 1 with the reason."""
    # loaded by these commands only: `onloop --help` stays fast
    from app.github.clients import GitHubApp
    from app.store.db import Database
    from tasks.queue.campaign_github import CampaignRefused
    from tasks.queue.campaigns import Coordinator

    settings = settings_or_exit(REQUIRED_FOR_SERVICE)
    check_migrated(settings)
    db = Database(settings.database_url)
    try:
        yield Coordinator(settings, db, GitHubApp.for_settings(settings))
    except CampaignRefused as exc:
        click.echo(f"onloop: {exc}", err=True)
        sys.exit(1)
    finally:
        db.dispose()


@click.group()
def campaign() -> None:
    """Campaigns: one change across many repositories, in one person's name."""


@campaign.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def start(file: Path) -> None:
    """Start the campaign FILE describes (again: its open PRs are updated, nothing doubles)."""
    from app.policy.repo_config import ConfigError
    from tasks.queue import campaign_ops

    text = file.read_text(encoding="utf-8")
    with _coordinator() as coordinator:
        try:
            started = campaign_ops.start(coordinator, text)
        except ConfigError as exc:
            click.echo(f"onloop: {file}: {exc}", err=True)
            sys.exit(2)
    verb = "started" if started.created else "updated"
    click.echo(
        f"campaign {verb}: {started.repositories} repositories, {started.skipped} skipped "
        f"(`onloop campaign status` follows it)"
    )


@campaign.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def status(name: str, as_json: bool) -> None:
    """Each repository of campaign NAME: its state, PR and CI, or why it was skipped."""
    from tasks.queue import campaign_ops

    with _coordinator() as coordinator:
        found = campaign_ops.status(coordinator, name)
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    click.echo(f"{found['name']} ({found['state']}), by @{found['owner']}")
    if found["tracking_issue"]:
        click.echo(f"tracking issue: {found['tracking_issue']}")
    for row in found["repositories"]:
        click.echo(_line(row))
    click.echo(", ".join(f"{k}: {v}" for k, v in sorted(found["totals"].items())))


def _line(row: dict[str, Any]) -> str:
    said = f"{row['repo']}: {row['state']}"
    if row["pr"]:
        said += f" #{row['pr']}" + (f" (CI {row['ci']})" if row["ci"] else "")
    return said + (f": {row['reason']}" if row["reason"] else "")


def _simple(name: str, act: Callable[[Coordinator, str], object], said: str) -> None:
    with _coordinator() as coordinator:
        act(coordinator, name)
    click.echo(said)


@campaign.command()
@click.argument("name")
def pause(name: str) -> None:
    """Start no new job for campaign NAME (running ones finish; PRs stay)."""
    from tasks.queue import campaign_ops

    _simple(name, campaign_ops.pause, f"campaign {name} paused")


@campaign.command()
@click.argument("name")
def resume(name: str) -> None:
    """Go on with a paused campaign NAME."""
    from tasks.queue import campaign_ops

    _simple(name, campaign_ops.resume, f"campaign {name} resumed")


@campaign.command()
@click.argument("name")
def cancel(name: str) -> None:
    """Stop the queued work of campaign NAME (its open PRs stay open)."""
    from tasks.queue import campaign_ops

    _simple(name, campaign_ops.cancel, f"campaign {name} cancelled")


@campaign.command()
@click.argument("name")
def close(name: str) -> None:
    """Close the unmerged PRs of campaign NAME with a comment, in its owner's name."""
    from tasks.queue import campaign_ops

    with _coordinator() as coordinator:
        closed = campaign_ops.close(coordinator, name)
    click.echo(f"campaign {name} closed: {len(closed)} pull requests closed")
