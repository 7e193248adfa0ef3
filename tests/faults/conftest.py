"""The fault suite's world (PostgreSQL only) and the fault-free drain time it compares with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.github.double import GitHubDouble
from tests.faults.harness import Stack, build


@pytest.fixture
def stack_overrides() -> dict[str, Any]:
    """Settings of the stack's processes that a test changes (by parametrizing this)."""
    return {}


@pytest.fixture
def stack(
    github_double: GitHubDouble,
    database_url: str,
    tmp_path: Path,
    stack_overrides: dict[str, Any],
) -> Iterator[Stack]:
    if database_url.startswith("sqlite"):
        pytest.skip("the fault suite runs on PostgreSQL (ONLOOP_TEST_DATABASE_URL)")
    world = build(github_double, database_url, tmp_path, **stack_overrides)
    yield world
    world.close()


@pytest.fixture(scope="session")
def baselines() -> dict[str, float]:
    """Fault-free drain times of this session, by scale, filled by the first run needing one."""
    return {}
