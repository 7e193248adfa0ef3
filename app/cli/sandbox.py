"""`onloop sandbox ...`: the sandbox's command-line group (added to the `onloop` group by main)."""

from __future__ import annotations

import sys

import click

from app.cli.common import check_migrated, settings_or_exit
from app.store.db import Database


@click.group("sandbox")
def sandbox() -> None:
    """Manage the job sandbox: its image and leftover containers."""


@sandbox.command("build-image")
@click.option(
    "--tag",
    default=None,
    help="Image tag to build (default: ONLOOP_SANDBOX_IMAGE, from the environment or .env).",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "docker", "rootfs"]),
    default="auto",
    show_default=True,
    help="docker: `docker build` (needs the base image); rootfs: mmdebstrap + import.",
)
@click.option("--force", is_flag=True, help="Rebuild even if the image is up to date.")
def build_image_command(tag: str | None, method: str, force: bool) -> None:
    """Build the default sandbox image, unless it exists with the same content hash."""
    # loaded by this command only: it needs Docker, `onloop --help` stays fast
    from tasks.sandbox.image import BuildError, build_image

    # Through Settings, as `onloop doctor` and the worker read it: .env counts too.
    tag = tag or settings_or_exit().sandbox_image
    try:
        result = build_image(tag, method=method, force=force, say=click.echo)
    except BuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if result.method == "cached":
        click.echo(f"{result.tag} is up to date (content {result.content_hash})")
    else:
        click.echo(
            f"built {result.tag} (content {result.content_hash}) with {result.method} "
            f"in {result.seconds:.0f}s"
        )


@sandbox.command("reap")
def reap_command() -> None:
    """Remove sandbox containers, networks, proxies and workspaces whose job is not running,
    as the database says (queued or running jobs keep theirs; anything under a minute old
    stays)."""
    # loaded by this command only: it needs Docker, `onloop --help` stays fast
    from tasks.sandbox.workplace import reap_sandboxes

    settings = settings_or_exit()
    check_migrated(settings)  # unreadable job states would keep every container anyway
    db = Database(settings.database_url)
    try:
        removed = reap_sandboxes(settings, db)
    finally:
        db.dispose()
    click.echo(f"removed {len(removed)} container(s), job network(s) and workspace(s)")
    for name in removed:
        click.echo(f"  {name}")


if __name__ == "__main__":  # .ci/sandbox-setup.sh: python -m app.cli.sandbox build-image
    sandbox()
