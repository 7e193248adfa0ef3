"""Sandbox test helpers: the Docker daemon (a failure in CI, a skip elsewhere), the default
image's name, and the containers of a job."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import docker
import pytest

from tasks.sandbox.base import Sandbox

IMAGE = os.environ.get("ONLOOP_SANDBOX_IMAGE", "onloop-sandbox:latest")
StartFn = Callable[..., Sandbox]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip, except in CI, where what the sandbox tests need must be there."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: this is a failure, not a skip)", pytrace=False)
    pytest.skip(reason)


def docker_or_fail() -> Any:
    """A live Docker client whose daemon answers, or a skip (a failure in CI)."""
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        unavailable(f"no Docker daemon reachable ({exc.__class__.__name__}: {exc})")
    return client


def job_containers(client: Any, job_id: int) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"onloop.job={job_id}"}))


def new_job_id() -> int:
    """A job id no test database holds (those count from 1; test_sandbox_cli's are below
    2·10^8) and no other test's sandbox shares, on a Docker daemon shared between runs."""
    return random.randrange(10**9, 2 * 10**9)
