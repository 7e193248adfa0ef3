"""Pytest fixtures: one GitHub double per session, reset before each test, and Settings for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.github_double.double import WEBHOOK_SECRET, GitHubDouble

SECRET_KEY = "test-secret-key-0123456789abcdef0123456789abcdef"


def settings_for(double: GitHubDouble, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings pointed at `double` (web at its url, REST at its /api/v3), with test secrets
    and PyGithub's pacing off (it would add 0.25 s to every request, 1 s to every write)."""
    values: dict[str, Any] = {
        "github_url": double.url,
        "github_api_url": double.api_url,
        "app_id": double.app.id,
        "app_slug": double.app.slug,
        "private_key_path": double.private_key_path,
        "webhook_secret": WEBHOOK_SECRET,
        "client_id": double.app.client_id,
        "client_secret": double.app.client_secret,
        "secret_key": SECRET_KEY,
        "database_url": f"sqlite:///{tmp_path / 'onloop.db'}",
        "github_pacing": False,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture(scope="session")
def github_double_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHubDouble]:
    """The one running double of the session; tests want `github_double` instead."""
    double = GitHubDouble(tmp_path_factory.mktemp("github-double"))
    yield double
    double.close()


# The one module whose tests merge and approve on purpose: they check that the double refuses.
REFUSAL_TESTS = "tests.test_github_double"


@pytest.fixture
def github_double(
    github_double_server: GitHubDouble, request: pytest.FixtureRequest
) -> Iterator[GitHubDouble]:
    """The double with a clean world; fails the test if the double itself hit a bug, or if
    anything asked it to merge or approve (onloop never does, across the whole suite)."""
    github_double_server.reset()
    yield github_double_server
    errors = list(github_double_server.errors)
    if errors:
        pytest.fail("GitHub double raised:\n" + "\n".join(errors), pytrace=False)
    refused = [f"{r.kind} {r.repo}#{r.number}" for r in github_double_server.refusals]
    if refused and request.module.__name__ != REFUSAL_TESTS:
        pytest.fail("onloop must never merge or approve, yet: " + ", ".join(refused), pytrace=False)


@pytest.fixture
def github_settings(github_double: GitHubDouble, tmp_path: Path) -> Settings:
    """Settings for onloop pointed at the double (see settings_for)."""
    return settings_for(github_double, tmp_path)
