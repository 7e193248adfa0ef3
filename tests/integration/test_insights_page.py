"""/insights: onloop's pull requests merged, closed and reverted (recorded from the webhook
deliveries of the GitHub double's repositories), rework, CI fix rounds, latency and spend,
shown only for the repositories the person may read (operators: all)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from app.core.settings import Settings
from app.store import audit
from app.store.db import Database
from app.store.models import AuditEntry, Job, JobState, utcnow
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.onloop_pulls import close, onloop_pull, revert, via_client
from tests.doubles.pages import operator_settings, pages_redis_url

__all__ = ["pages_redis_url"]  # the fixture

REPO, OTHER = "acme/secret", "acme/other"


@pytest.fixture
def settings(
    github_double: GitHubDouble, database_url: str, pages_redis_url: str, tmp_path: Path
) -> Settings:
    for repo in (REPO, OTHER):
        github_double.create_repo(repo, {"README.md": "hi\n"}, private=True)
    github_double.set_permission(REPO, "alice", "read")
    github_double.user("olivia")
    return operator_settings(github_double, tmp_path, database_url, pages_redis_url)


def jobs(db: Database, repo: str) -> None:
    """fix_issue twice; on PR 1 a fix_ci that failed, then one that made it green."""
    start = utcnow() - timedelta(hours=1)
    rows = [  # kind, state, number, seconds to first command, to result, tokens, sandbox s
        ("fix_issue", JobState.SUCCEEDED, 7, 10, 100, 1000, 60),
        ("fix_issue", JobState.FAILED, 9, 20, 200, 500, 120),
        ("fix_ci", JobState.FAILED, 1, 30, 300, 250, 30),
        ("fix_ci", JobState.SUCCEEDED, 1, 40, 400, 250, 30),
    ]
    with db.transaction() as s:
        for n, (kind, state, number, first, done, tokens, seconds) in enumerate(rows):
            created = start + timedelta(minutes=n)
            job = Job(
                kind=kind,
                repo=repo,
                number=number,
                requested_by="alice",
                state=state,
                created_at=created,
                started_at=created,
                finished_at=created + timedelta(seconds=done),
                agent_tokens_in=tokens,
                agent_tokens_out=0,
                sandbox_seconds=seconds,
            )
            s.add(job)
            s.flush()
            at = created + timedelta(seconds=first)
            s.add(AuditEntry(at=at, job_id=job.id, repo=repo, action=audit.SANDBOX_EXEC))
            s.add(
                AuditEntry(
                    at=at + timedelta(seconds=5),
                    job_id=job.id,
                    repo=repo,
                    action=audit.SANDBOX_EXEC,
                )
            )


def figure(html: str, element_id: str) -> str:
    found = re.search(rf'id="{re.escape(element_id)}"[^>]*data-value="([^"]*)"', html)
    assert found is not None, f"no figure {element_id}"
    return found.group(1)


@pytest.fixture
def history(settings: Settings, db: Database, github_double: GitHubDouble) -> FlaskClient:
    """In acme/secret: PR 1 with a person's commit, merged, then reverted on main; PR 2
    closed unmerged. In acme/other, which alice cannot read: PR 1 merged."""
    client = create_app(settings, db=db).test_client()
    send = via_client(client)
    first = onloop_pull(github_double, send, REPO, "onloop/issue-7", human=True)
    second = onloop_pull(github_double, send, REPO, "onloop/issue-9", human=False)
    merged = close(github_double, send, REPO, first, merge=True)
    close(github_double, send, REPO, second, merge=False)
    revert(github_double, send, REPO, merged)
    elsewhere = onloop_pull(github_double, send, OTHER, "onloop/issue-3", human=False)
    close(github_double, send, OTHER, elsewhere, merge=True)
    jobs(db, REPO)
    return client


def test_a_reader_sees_her_repository_s_pull_requests_merged_closed_and_reverted(
    history: FlaskClient, github_double: GitHubDouble
) -> None:
    page = open_signed_in(history, github_double, "alice", "/insights")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    for prefix in ("insight-", "insight-acme--secret-"):
        assert figure(html, prefix + "prs-opened") == "2"
        assert figure(html, prefix + "prs-merged") == "1"
        assert figure(html, prefix + "prs-closed") == "1"
        assert figure(html, prefix + "prs-reverted") == "1"
        assert figure(html, prefix + "rework-commits") == "1"
        assert figure(html, prefix + "reworked-prs") == "1"
    assert OTHER not in html and "insight-acme--other-" not in html


def test_jobs_ci_rounds_latency_and_spend(
    history: FlaskClient, github_double: GitHubDouble
) -> None:
    assert open_signed_in(history, github_double, "alice", "/insights").status_code == 200
    html = history.get("/insights?period=7d").get_data(as_text=True)
    assert figure(html, "insight-period") == "7d"
    assert figure(html, "insight-jobs-total") == "4"
    assert figure(html, "insight-jobs-fix_issue-succeeded") == "1"
    assert figure(html, "insight-jobs-fix_issue-failed") == "1"
    assert figure(html, "insight-jobs-fix_ci") == "2"
    assert figure(html, "insight-ci-fixed") == "1"
    assert figure(html, "insight-ci-rounds") == "2"
    assert figure(html, "insight-ci-rounds-per-fix") == "2.00"
    assert figure(html, "insight-to-command-p50") == "20.0"  # first command, not the second
    assert figure(html, "insight-to-command-p95") == "40.0"
    assert figure(html, "insight-to-result-p50") == "200.0"
    assert figure(html, "insight-to-result-p95") == "400.0"
    assert figure(html, "insight-agent-tokens") == "2000"
    assert figure(html, "insight-sandbox-minutes") == "4.0"
    chart = html.split('id="insight-jobs-chart"')[1].split("</svg>")[0]
    assert (
        chart.count('class="seg seg-succeeded"') == 2 and "<title>fix_ci failed: 1</title>" in chart
    )
    assert "style=" not in html and "<script" not in html


def test_an_operator_sees_every_repository_and_one_on_its_own(
    history: FlaskClient, github_double: GitHubDouble
) -> None:
    html = open_signed_in(history, github_double, "olivia", "/insights").get_data(as_text=True)
    assert figure(html, "insight-prs-merged") == "2"
    assert figure(html, "insight-acme--other-prs-merged") == "1"
    assert figure(html, "insight-acme--secret-prs-reverted") == "1"
    one = history.get(f"/insights?repo={OTHER}&period=90d").get_data(as_text=True)
    assert figure(one, "insight-prs-merged") == "1" and figure(one, "insight-prs-reverted") == "0"
    assert "insight-acme--secret-" not in one


def test_a_repository_the_person_cannot_read_is_404_and_a_bad_period_400(
    history: FlaskClient, github_double: GitHubDouble
) -> None:
    assert open_signed_in(history, github_double, "alice", "/insights").status_code == 200
    hidden = history.get(f"/insights?repo={OTHER}")
    missing = history.get("/insights?repo=acme/nothing")
    asked = len(github_double.calls())
    for odd in ("acme/secret/../../user", "acme/..", "-acme/x", "acme"):
        assert history.get("/insights", query_string={"repo": odd}).status_code == 404, odd
    assert len(github_double.calls()) == asked  # no such path asked of GitHub
    assert hidden.status_code == missing.status_code == 404
    assert OTHER not in hidden.get_data(as_text=True)
    assert history.get("/insights?period=1y").status_code == 400


def test_without_a_session_insights_sends_to_sign_in(history: FlaskClient) -> None:
    answer = history.get("/insights")
    assert answer.status_code == 302 and answer.headers["Location"] == "/oauth/login?next=/insights"
