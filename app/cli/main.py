"""The `onloop` command line: web, worker, beat, dev, replay, doctor, redeliver, db, sandbox."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import click
import requests
from github import GithubException
from pydantic import ValidationError

from app.cli import admin, campaign, jobs, sandbox, setup
from app.cli.common import check_migrated, check_org_file, parse_since, settings_or_exit
from app.cli.dev import DEV_SECRETS, run_dev, stored_dev_secrets
from app.cli.doctor import explain_failure, run_doctor
from app.cli.sources import by_source, use_dev_secrets, value_sources
from app.core.logs import configure_logging
from app.core.publicurl import webhook_url
from app.core.settings import REQUIRED_FOR_SERVICE, Settings, load_settings
from app.github.clients import GitHubApp
from app.github.transport import fail_fast
from app.intake.events import OUTCOME_HEADER, sign
from app.intake.freshness import refreshed
from app.store import migrate
from app.store.db import Database
from tasks.queue.redeliver import redeliver_missed


class FullHelpGroup(click.Group):
    """A group whose command list gives each command's whole first sentence, not 45 columns."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=FullHelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onloop", prog_name="onloop")
def main() -> None:
    """onloop: background coding agents for a GitHub organisation."""
    # Every command logs through the one pipeline (token redaction, the INFO floor for
    # PyGithub and urllib3); web, worker and dev set it again from their settings.
    configure_logging()


@main.command()
@click.option("--bind", default="127.0.0.1:8000", show_default=True, help="HOST:PORT")
def web(bind: str) -> None:
    """Serve the Flask app with gunicorn."""
    # loaded by this command only: gunicorn and Flask, `onloop --help` stays fast
    from app.cli.server import serve

    settings = settings_or_exit(REQUIRED_FOR_SERVICE)
    configure_logging(settings.log_level, settings.log_json)
    check_org_file(settings)
    check_migrated(settings)
    serve(settings, bind)


@main.command()
@click.option("--concurrency", default=4, show_default=True, help="jobs run at once")
@click.option("--beat/--no-beat", default=False, help="also run the periodic scheduler")
def worker(concurrency: int, beat: bool) -> None:
    """Run the Celery worker (and the outbox dispatcher)."""
    # loaded by this command only: the worker and Celery, `onloop --help` stays fast
    from tasks.worker import run_worker

    settings = settings_or_exit((*REQUIRED_FOR_SERVICE, "redis_url"))
    configure_logging(settings.log_level, settings.log_json)
    check_org_file(settings)
    check_migrated(settings)
    run_worker(settings, concurrency=concurrency, beat=beat)


@main.command()
@click.option("--bind", default="127.0.0.1:8000", show_default=True)
def dev(bind: str) -> None:
    """Web and worker together with embedded defaults (SQLite, a local Redis)."""
    check_org_file(settings_or_exit())
    run_dev(bind)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--event", "event_name", required=True, help="the X-GitHub-Event name")
@click.option("--url", default=None, help="default: ONLOOP_PUBLIC_URL/webhooks/github")
@click.option("--delivery", default=None, help="the X-GitHub-Delivery GUID (default: new)")
@click.option(
    "--fresh",
    is_flag=True,
    help="stamp the current time on the comment or label first (a recorded one is old)",
)
def replay(file: Path, event_name: str, url: str | None, delivery: str | None, fresh: bool) -> None:
    """Send a signed webhook delivery from a JSON file, as is.

    A comment or label older than ONLOOP_MAX_EVENT_AGE (default an hour) starts no work: the
    server answers 204 and records it as stale. Use --fresh to replay one as if just made."""
    settings = settings_or_exit()
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
    secret = secret or stored_dev_secrets().get("ONLOOP_WEBHOOK_SECRET")  # as `onloop dev` does
    if not secret:
        raise click.ClickException(
            "no webhook secret: set ONLOOP_WEBHOOK_SECRET (or run `onloop dev` once, which"
            f" generates one in {DEV_SECRETS})"
        )
    body = file.read_bytes()
    try:
        data = json.loads(body)  # fail here, not on the server, when the file is not JSON
    except ValueError as exc:
        raise click.ClickException(f"{file} is not JSON: {exc}") from None
    if fresh and isinstance(data, dict):
        body = json.dumps(refreshed(data, event_name, datetime.now(UTC))).encode()
    target = url or webhook_url(settings.public_url)
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event_name,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "User-Agent": "onloop-replay",
    }
    try:
        response = requests.post(target, data=body, headers=headers, timeout=30)
    except requests.RequestException as exc:
        reason = "connection refused" if isinstance(exc, requests.ConnectionError) else str(exc)
        raise click.ClickException(
            f"could not deliver to {target}: {reason}. Is onloop running (`onloop dev`)?"
            " Use --url for another address."
        ) from None
    why = response.headers.get(OUTCOME_HEADER)
    click.echo(f"{response.status_code} {response.text.strip() or why or ''}".rstrip())
    sys.exit(0 if response.status_code < 400 else 1)


@main.command()
def doctor() -> None:
    """Check configuration, database, Redis, Docker and GitHub credentials."""
    filled = use_dev_secrets()  # the same sources as `onloop dev`
    sources = by_source(value_sources(dev_filled=tuple(filled))) or "no ONLOOP_* values set"
    sys.exit(run_doctor(load_settings_for_doctor(), sources))


def load_settings_for_doctor() -> Settings | ValidationError:
    try:
        return load_settings()
    except ValidationError as exc:
        return exc


@main.command()
@click.option("--since", default="24h", show_default=True, help="how far back: 30m, 24h, 7d")
def redeliver(since: str) -> None:
    """Ask GitHub to redeliver deliveries that never reached onloop."""
    settings = settings_or_exit(("app_id", "private_key_path"))
    try:
        with fail_fast():  # a person waits: no retries with minutes of backoff
            github = GitHubApp.for_settings(settings)
            guids = redeliver_missed(github, Database(settings.database_url), parse_since(since))
    except (requests.RequestException, GithubException) as exc:
        detail, hint = explain_failure(exc, settings.github_api_url)
        click.echo(f"onloop: {detail} -> {hint}", err=True)
        sys.exit(1)
    click.echo(f"requested {len(guids)} redelivery(ies)")
    for guid in guids:
        click.echo(f"  {guid}")


@main.group()
def db() -> None:
    """Database migrations."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply the Alembic migrations."""
    settings = settings_or_exit()
    migrate.upgrade(settings.database_url, revision)
    click.echo(f"database at {migrate.current(settings.database_url)}")


for command in (
    admin.pause,
    admin.resume,
    admin.audit,
    jobs.jobs,
    campaign.campaign,
    setup.setup,
    setup.beat,
    sandbox.sandbox,
):
    main.add_command(command)


if __name__ == "__main__":
    main()
