"""Sandbox images are the operator's choice: a repository picks one of the allowed names."""

from __future__ import annotations

import re
from collections.abc import Sequence

# A Docker image reference, as github.com/distribution/reference's grammar has it: an
# optional registry host, lower-case path components, an optional tag and digest. It never
# matches a path (no leading '/' or '.', no '..', no empty component).
_ALNUM = r"[a-z0-9]+"
_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?")
MAX_NAME = 255
# onloop's own dependency snapshots (tasks/sandbox/snapshots.py names them so): one
# repository's installed dependencies, never an image a repository or the operator names.
SNAPSHOT_REPOSITORY = "onloop-snapshot"
_NAME_ONE = "name one the operator allows (ONLOOP_SANDBOX_IMAGE or `sandbox.images`)"
WHERE = "the operator adds images to `sandbox.images` in the organisation file (ONLOOP_CONFIG_FILE)"


class ImageNotAllowed(Exception):
    """A repository asked for an image the operator has not allowed; says which are."""

    def __init__(self, requested: str, allowed: Sequence[str]) -> None:
        names = ", ".join(f"`{name}`" for name in allowed)
        what = "onloop's own dependency snapshot" if is_snapshot(requested) else "not allowed"
        self.message = (
            f"`sandbox.image: {requested}` in `.github/onloop.yml` is {what}: a repository "
            f"may choose only among the images the operator allows ({names}); {WHERE}"
        )
        super().__init__(self.message)


def is_snapshot(reference: str) -> bool:
    """Whether `reference` names one of onloop's dependency snapshots (on any registry)."""
    name = reference.split("@", 1)[0]
    parts = name.split("/")
    return SNAPSHOT_REPOSITORY in parts[:2] or name.startswith(SNAPSHOT_REPOSITORY)


def check_reference(value: str) -> str:
    """`value` when it is an image name shaped like a Docker reference (never a host path);
    ValueError saying why otherwise."""
    if value.startswith(("/", ".", "~")) or ".." in value or "\\" in value:
        raise ValueError(f"{value!r} looks like a path, not an image; {_NAME_ONE}")
    match = REFERENCE.fullmatch(value)
    if match is None or len(match.group("name")) > MAX_NAME:
        raise ValueError(f"{value!r} is not an image name like python:3.12-slim; {_NAME_ONE}")
    return value


def check_operator_image(value: str) -> str:
    """An entry of the organisation's `sandbox.images`: a reference, and not a snapshot."""
    check_reference(value)
    if is_snapshot(value):
        raise ValueError(f"{value!r} is one of onloop's own dependency snapshots, not an image")
    return value


def allowed_images(default: str, listed: Sequence[str]) -> tuple[str, ...]:
    """The images jobs may run: ONLOOP_SANDBOX_IMAGE (always) and the organisation's list."""
    return (default, *(name for name in dict.fromkeys(listed) if name != default))


def choose_image(requested: str | None, allowed: Sequence[str]) -> str:
    """The image a job runs: the repository's `sandbox.image` when it is one of `allowed`
    (exactly), the first of `allowed` (the default) when it names none; ImageNotAllowed for
    anything else: a host path, another image, a snapshot."""
    if not requested:
        return allowed[0]
    if requested in allowed and not is_snapshot(requested):
        return requested
    raise ImageNotAllowed(requested, allowed)
