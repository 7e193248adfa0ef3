"""`onloop doctor` reads what `onloop dev` reads, says where each value came from, and checks
the public URL and a database that is not there yet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.store import migrate

ROOT = Path(__file__).resolve().parents[2]


def doctor(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "doctor"],
        cwd=cwd,
        env=clean | {"PYTHONPATH": str(ROOT), "ONLOOP_SANDBOX_BACKEND": "local"} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def line(out: str, check: str) -> str:
    (found,) = [x for x in out.splitlines() if x[5:].startswith(f"{check}:")]
    return found


def test_doctor_says_where_each_value_came_from_and_uses_devs_secrets(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "dev-secrets.env").write_text(
        "ONLOOP_WEBHOOK_SECRET=generated-by-dev-0123456789\nONLOOP_SECRET_KEY=generated-key\n"
    )
    url = f"sqlite:///{tmp_path / 'var' / 'onloop.db'}"
    migrate.upgrade(url)
    (tmp_path / ".env").write_text(f"ONLOOP_DATABASE_URL={url}\nONLOOP_SECRET_KEY=from-env-file\n")
    out = doctor(tmp_path, ONLOOP_REDIS_URL="redis://127.0.0.1:6379/9").stdout
    sources = line(out, "sources")
    assert "from .env: ONLOOP_DATABASE_URL, ONLOOP_SECRET_KEY" in sources, out
    assert "from var/dev-secrets.env: ONLOOP_WEBHOOK_SECRET" in sources, out
    assert "from the environment: ONLOOP_REDIS_URL" in sources, out
    assert "generated" not in out and "from-env-file" not in out  # names, never values
    assert line(out, "webhook secret").startswith("ok")  # dev's, as dev would use it
    head = migrate.head()
    assert f"at revision {migrate.describe(head)}" in line(out, "database"), out
    assert migrate.describe(head) != head  # the revision is named


def test_a_missing_database_or_folder_says_run_db_upgrade(tmp_path: Path) -> None:
    out = doctor(tmp_path, ONLOOP_DATABASE_URL=f"sqlite:///{tmp_path}/nowhere/onloop.db").stdout
    database = line(out, "database")
    assert database.startswith("FAIL") and "no database at" in database
    assert database.endswith("-> run `onloop db upgrade`"), database
    assert not (tmp_path / "nowhere").exists()  # doctor made nothing


@pytest.mark.parametrize("public", ["localhost:8000", "https://h.example/?a=1"])
def test_a_public_url_github_could_not_use_fails(tmp_path: Path, public: str) -> None:
    out = doctor(tmp_path, ONLOOP_PUBLIC_URL=public).stdout
    assert line(out, "public url").startswith("FAIL"), out


def test_the_public_url_line_gives_the_apps_addresses(tmp_path: Path) -> None:
    out = doctor(tmp_path, ONLOOP_PUBLIC_URL="https://onloop.example.com").stdout
    said = line(out, "public url")
    assert said.startswith("ok")
    assert "https://onloop.example.com/webhooks/github" in said
    assert "https://onloop.example.com/oauth/callback" in said
