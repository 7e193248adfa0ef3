"""What the web's answers say of themselves: /metrics' content type, a 204 without one."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from tests.doubles.webhooks import deliver, load_fixture


def test_metrics_content_type_has_one_charset(client: Any) -> None:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert answer.headers["Content-Type"].count("charset") == 1


def test_an_ignored_delivery_says_why_in_a_header_and_has_no_content_type(client: Any) -> None:
    answer = deliver(client, "issues", load_fixture("issues.labeled"))
    assert answer.status_code == 204
    assert "Content-Type" not in answer.headers
    assert answer.headers["X-Onloop-Outcome"] == "ignored: not the fix label"
