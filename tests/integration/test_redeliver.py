"""Redelivery: deliveries GitHub failed to hand over, and onloop never recorded, are asked for
again; the rest are left alone."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from app.github.clients import GitHubApp
from app.store.db import Database
from app.store.models import Delivery, RedeliveryRequest
from tasks.queue.redeliver import redeliver_missed
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.settings import settings_for


def test_only_missed_unrecorded_deliveries_are_redelivered(
    github_double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    settings = settings_for(github_double, tmp_path, database_url=database_url)
    now = time.time()
    github_double.add_delivery("issues", "labeled", status_code=200, guid="ok")
    missed = github_double.add_delivery("issues", "labeled", status_code=502, guid="missed")
    github_double.add_delivery("issue_comment", "created", status_code=0, guid="timed-out")
    github_double.add_delivery("issues", "labeled", status_code=502, guid="recorded")
    github_double.add_delivery("issues", "labeled", status_code=400, guid="malformed")
    github_double.add_delivery(
        "ping", None, status_code=500, guid="old", delivered_at=now - 3 * 86400
    )
    github_double.add_delivery(
        "issues", "opened", status_code=502, guid="retried", delivered_at=now - 60
    )
    github_double.add_delivery("issues", "opened", status_code=202, guid="retried", redelivery=True)
    for i in range(150):  # more than one page
        github_double.add_delivery("push", None, status_code=200, guid=f"filler-{i}")
    with db.transaction() as s:
        s.add(Delivery(guid="recorded", event="issues", outcome="fix_issue"))

    since = datetime.now(UTC) - timedelta(hours=24)
    asked = redeliver_missed(GitHubApp.for_settings(settings), db, since)

    assert sorted(asked) == ["missed", "timed-out"]
    by_id = {d.id: d.guid for d in github_double.deliveries}
    assert sorted(by_id[i] for i in github_double.redeliveries) == ["missed", "timed-out"]
    assert missed.id in github_double.redeliveries
    with db.read() as s:  # remembered, so intake lets their old bodies past the age check
        noted = sorted(s.scalars(select(RedeliveryRequest.guid)))
    assert noted == ["missed", "timed-out"]
