"""`onloop setup` (register the GitHub App from a manifest) and `onloop beat` (the scheduler)."""

from __future__ import annotations

import secrets
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

import click
from pydantic import ValidationError

from app.cli.common import settings_or_exit
from app.cli.dev import check_port
from app.core.logs import configure_logging
from app.core.publicurl import public_url_problem
from app.core.settings import Settings, load_settings
from app.github import manifest


@click.command()
@click.option("--org", default=None, help="create the App in this organisation")
@click.option("--name", default=None, help="the App's name (GitHub lets you change it)")
@click.option(
    "--env-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(".env"),
    show_default=True,
    help="where to write the App's settings",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="where to write the private key (default: <slug>.private-key.pem next to .env)",
)
@click.option(
    "--bind", default=None, help="HOST:PORT (default: 127.0.0.1 and the public URL's port)"
)
@click.option("--force", is_flag=True, help="replace an App already configured in the .env file")
def setup(
    org: str | None,
    name: str | None,
    env_file: Path,
    key_file: Path | None,
    bind: str | None,
    force: bool,
) -> None:
    """Create onloop's GitHub App from a manifest and write its settings to .env."""
    # loaded by this command only: Flask, `onloop --help` stays fast
    from werkzeug.serving import make_server

    from app.web.setup import SetupOptions, create_setup_app, setup_state, setup_url

    settings = _settings_from(env_file)
    taken = manifest.existing(env_file)
    if not force and (taken or settings.app_id is not None):
        names = ", ".join(taken) or "ONLOOP_APP_ID (in the environment)"
        click.echo(f"onloop: already configured: {names}. Use --force to replace it.", err=True)
        sys.exit(1)
    if org is not None and not manifest.LOGIN.match(org):
        raise click.BadParameter("not a GitHub organisation name", param_hint="--org")
    public = settings.public_url.rstrip("/")
    problem = public_url_problem(public)
    if problem:
        click.echo(f"onloop: ONLOOP_PUBLIC_URL {settings.public_url!r} {problem}", err=True)
        sys.exit(2)
    host, port = _bind(bind, public)
    check_port(f"{host}:{port}")  # werkzeug would exit with its own message otherwise
    options = SetupOptions(env_file=env_file, key_file=key_file, overwrite=force)
    app = create_setup_app(settings, options)
    server = make_server(host, port, app)
    # Written before the browser goes to GitHub: the signed state needs the key, and the
    # App GitHub makes points at this URL, so both are this instance's from now on.
    wrote = _write_prerequisites(settings, env_file, public)
    settings = load_settings(_env_file=str(env_file)) if wrote else settings
    setup_state(app).settings = settings
    server.timeout = 0.5
    state = setup_state(app)
    # A shell starts background commands with SIGINT ignored, and Python then leaves it so:
    # Ctrl-C (or a SIGINT from a supervisor) must still stop setup and say what it kept. Set
    # before the "Open" line: whoever reads it may send SIGINT at once.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        click.echo(
            f"Open {setup_url(settings, state.code, org=org, name=name)} in your browser.\n"
            f"GitHub sends you back to {public}/setup/callback: that must reach this process,"
            f" which listens on {host}:{server.server_port}. Ctrl-C to stop."
        )
        while not state.done.is_set():
            server.handle_request()
    except KeyboardInterrupt:
        kept = f"; kept {', '.join(wrote)} in {env_file} for the next run" if wrote else ""
        click.echo(f"stopped before GitHub sent the App back: no App was written{kept}", err=True)
        sys.exit(130)
    finally:
        server.server_close()
    click.echo(
        f"Wrote {', '.join(state.written)} to {env_file} and the private key to"
        f" {state.written_key}.\nNext: install the App on your repositories, then run"
        " `onloop db upgrade`, `onloop web` and `onloop worker` (or `docker compose up -d`)."
    )


def _settings_from(env_file: Path) -> Settings:
    """The settings with `env_file` as the .env file; bad ones named (never shown), exit 2."""
    try:
        return load_settings(_env_file=str(env_file))
    except ValidationError as exc:
        names = sorted({f"ONLOOP_{str(e['loc'][0]).upper()}" for e in exc.errors() if e["loc"]})
        click.echo(f"onloop: invalid settings: {', '.join(names)}", err=True)
        sys.exit(2)


def _write_prerequisites(settings: Settings, env_file: Path, public: str) -> list[str]:
    """ONLOOP_SECRET_KEY (generated) and ONLOOP_PUBLIC_URL into .env where it has none."""
    values: dict[str, str] = {}
    if settings.secret_key is None:
        values["ONLOOP_SECRET_KEY"] = secrets.token_urlsafe(48)
    if not manifest.existing(env_file, ("ONLOOP_PUBLIC_URL",)):
        values["ONLOOP_PUBLIC_URL"] = public
    if values:
        manifest.update_env(env_file, values)
        click.echo(f"wrote {', '.join(values)} into {env_file}")
    return list(values)


def _bind(bind: str | None, public: str) -> tuple[str, int]:
    if bind:
        host, _, port = bind.rpartition(":")
        return host or "127.0.0.1", int(port)
    return "127.0.0.1", urlsplit(public).port or 8000


@click.command()
def beat() -> None:
    """Run the periodic scheduler (one per deployment; workers run what it queues)."""
    # loaded by this command only: Celery, `onloop --help` stays fast
    from tasks.queue.beat import run_beat

    settings = settings_or_exit(("redis_url",))
    configure_logging(settings.log_level, settings.log_json)
    run_beat(settings)
