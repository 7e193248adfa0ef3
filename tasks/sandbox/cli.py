"""`onloop sandbox ...`: the sandbox's command-line group (registered into the `onloop` CLI)."""

from __future__ import annotations

import sys

import click


@click.group("sandbox")
def sandbox() -> None:
    """Manage the job sandbox: its image and leftover containers."""


@sandbox.command("build-image")
@click.option(
    "--tag",
    envvar="ONLOOP_SANDBOX_IMAGE",
    default="onloop-sandbox:latest",
    show_default=True,
    help="Image tag to build (env ONLOOP_SANDBOX_IMAGE).",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "docker", "rootfs"]),
    default="auto",
    show_default=True,
    help="docker: `docker build` (needs the base image); rootfs: mmdebstrap + import.",
)
@click.option("--force", is_flag=True, help="Rebuild even if the image is up to date.")
def build_image_command(tag: str, method: str, force: bool) -> None:
    """Build the default sandbox image, unless it exists with the same content hash."""
    from tasks.sandbox.image import BuildError, build_image

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
@click.option(
    "--all", "remove_all", is_flag=True, help="Remove every onloop container, running job or not."
)
def reap_command(remove_all: bool) -> None:
    """Remove sandbox containers whose job is not running (by default: idle pools of dead
    workers only; the worker's periodic reaper knows which jobs run)."""
    import docker

    from tasks.sandbox.reaper import reap

    removed = reap(docker.from_env(), lambda _job: not remove_all, min_age=0)
    click.echo(f"removed {len(removed)} container(s) and job network(s)")
    for name in removed:
        click.echo(f"  {name}")


if __name__ == "__main__":
    sandbox()
