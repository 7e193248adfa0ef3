"""What the page tests share: a test Redis without other tests' sessions, and settings whose
organisation file names the operator Olivia."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.core.settings import Settings
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for

OPERATOR = "Olivia"


def clean(client: redis.Redis) -> None:
    """Drop the pages' sessions and cached access checks (the double's ids repeat)."""
    for pattern in ("onloop:session:*", "onloop:pages:*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


@pytest.fixture
def pages_redis_url() -> Iterator[str]:
    """The test Redis (ONLOOP_TEST_REDIS_URL), without other tests' sessions."""
    url = os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
    client = redis.Redis.from_url(url)
    clean(client)
    yield url
    clean(client)
    client.close()


def operator_settings(
    double: GitHubDouble, tmp_path: Path, database_url: str, redis_url: str
) -> Settings:
    """Settings on the double whose organisation file makes `OPERATOR` a dashboard operator."""
    operators = tmp_path / "onloop-org.yml"
    operators.write_text(f"dashboard:\n  operators: [{OPERATOR}]\n")
    return settings_for(
        double, tmp_path, database_url=database_url, redis_url=redis_url, config_file=operators
    )
