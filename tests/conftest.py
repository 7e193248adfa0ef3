"""Shared fixtures: a real database (SQLite, or PostgreSQL from ONLOOP_TEST_DATABASE_URL),
real Redis, the Flask app, and signed deliveries from ../shared/fixtures/webhooks."""

from __future__ import annotations

import copy
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import create_app
from app.db import Database
from app.events import sign
from app.settings import Settings

pytest_plugins = (
    ["tests.github_double.fixtures"]
    if (Path(__file__).parent / "github_double" / "fixtures.py").exists()
    else []
)  # TEMP

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = next(
    p
    for p in (
        Path(os.environ.get("ONLOOP_FIXTURES", "/nonexistent")),
        ROOT.parent / "shared" / "fixtures" / "webhooks",
        ROOT / "tests" / "fixtures" / "webhooks",
    )
    if p.is_dir()
)
SECRET = "test-webhook-secret-0123456789abcdef"
TABLES = (
    "outbox",
    "jobs",
    "deliveries",
    "installations",
    "repo_configs",
    "user_accounts",
    "pauses",
    "audit_log",
)


def load_fixture(name: str) -> dict[str, Any]:
    """A payload from shared/fixtures/webhooks, as a fresh dict the test may edit."""
    return copy.deepcopy(json.loads((FIXTURES / f"{name}.json").read_text()))


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def event_name(fixture: str) -> str:
    return fixture.split(".", 1)[0]


@pytest.fixture(scope="session")
def _template_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Migrate once per session: a SQLite template file, or a fresh PostgreSQL database."""
    from app import migrate

    url = os.environ.get("ONLOOP_TEST_DATABASE_URL")
    if url and not url.startswith("sqlite"):
        name = f"onloop_test_{uuid.uuid4().hex[:8]}"
        admin = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        test_url = make_url(url).set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(test_url)
        return test_url
    path = tmp_path_factory.mktemp("db") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    return str(path)


@pytest.fixture
def database_url(_template_db: str, tmp_path: Path) -> str:
    """A migrated, empty database for one test."""
    if _template_db.startswith("postgresql"):
        engine = create_engine(_template_db)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
        engine.dispose()
        return _template_db
    path = tmp_path / "onloop.db"
    shutil.copy(_template_db, path)
    return f"sqlite:///{path}"


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database_url,
        webhook_secret=SECRET,  # type: ignore[arg-type]
        app_slug="onloop",
        redis_url=os.environ.get("ONLOOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/9"),
    )


@pytest.fixture
def client(settings: Settings, db: Database) -> Any:
    app = create_app(settings, db=db)
    redis = app.extensions["onloop"].metrics.writer.client
    if redis is not None:  # metrics live in the shared test Redis: start each test from zero
        keys = list(redis.scan_iter("onloop:metrics:*"))
        if keys:
            redis.delete(*keys)
    return app.test_client()


def signed_headers(body: bytes, event: str, guid: str | None = None) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": guid or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, SECRET),
    }


def deliver(client: Any, event: str, payload: dict[str, Any], guid: str | None = None) -> Any:
    """POST a signed delivery through the Flask test client."""
    body = json.dumps(payload).encode()
    return client.post("/webhooks/github", data=body, headers=signed_headers(body, event, guid))


def counts(db: Database) -> dict[str, int]:
    with db.engine.connect() as conn:
        return {
            t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in TABLES
        }
