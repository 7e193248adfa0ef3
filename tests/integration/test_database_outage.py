"""The database away at intake: deliveries are answered 503 with Retry-After (not acknowledged,
so GitHub shows them failed and `onloop redeliver` asks for them again), nothing is half
recorded, and the log has one line when the outage starts and one when it ends, not a
traceback per request."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app.core.settings import Settings
from app.store.db import Database
from app.web import create_app
from tests.doubles.tcp_proxy import TcpProxy
from tests.doubles.webhooks import counts, deliver, load_fixture


def label(number: int) -> dict[str, Any]:
    data = load_fixture("issues.labeled.with-organization")
    data["label"]["name"] = "agent:fix"
    data["issue"]["number"] = number
    data["installation"] = {"id": 42}
    return data


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lines(logged: str, event: str) -> list[str]:
    return [line for line in logged.splitlines() if event in line]


def logged(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """What was logged, through structlog's own printer or through stdlib logging."""
    out = capsys.readouterr()
    return "\n".join((out.out, out.err, caplog.text))


def app_for(settings: Settings, url: str) -> tuple[Any, Database]:
    db = Database(url)
    return create_app(settings.model_copy(update={"database_url": url}), db=db), db


def test_no_database_is_503_with_retry_after_and_one_log_line(
    settings: Settings, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/postgres"
    app, db = app_for(settings, url)
    client = app.test_client()
    try:
        with caplog.at_level(logging.INFO):
            answers = [deliver(client, "issues", label(n)) for n in range(1, 6)]
    finally:
        db.dispose()
    assert [a.status_code for a in answers] == [503] * 5
    assert all(int(a.headers["Retry-After"]) > 0 for a in answers)
    assert "database unavailable" in answers[0].json["error"]
    text = logged(capsys, caplog)
    assert len(lines(text, "database.unavailable")) == 1
    assert "Connection refused" in lines(text, "database.unavailable")[0]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback at all
    assert "Traceback" not in text


@pytest.fixture
def proxied(database_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """The test's PostgreSQL database, reached through a proxy the test can cut."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        pytest.skip("needs PostgreSQL (ONLOOP_TEST_DATABASE_URL)")
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    proxy.stop()


def test_an_outage_and_its_end_are_one_line_each_and_lose_nothing(
    settings: Settings,
    db: Database,
    proxied: tuple[TcpProxy, str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy, url = proxied
    app, through = app_for(settings, url)
    client = app.test_client()
    try:
        with caplog.at_level(logging.INFO):
            assert deliver(client, "issues", label(1)).status_code == 202
            proxy.stop()  # PostgreSQL goes away: the open connection is cut, new ones refused
            down = [deliver(client, "issues", label(n)) for n in range(2, 12)]
            proxy.start()
            up = [deliver(client, "issues", label(n)) for n in range(12, 15)]
    finally:
        through.dispose()
    assert [a.status_code for a in down] == [503] * 10
    assert [a.status_code for a in up] == [202] * 3
    text = logged(capsys, caplog)
    assert len(lines(text, "database.unavailable")) == 1
    (ended,) = lines(text, "database.available")
    assert "answered_503" in ended and "10" in ended
    assert "Traceback" not in text
    # Only the acknowledged deliveries are recorded, each whole with its job.
    recorded = counts(db)
    assert (recorded["deliveries"], recorded["jobs"], recorded["outbox"]) == (4, 4, 4)
