"""/jobs/<id>: signed in through the GitHub double's OAuth pages, seen only by people who can
read the job's repository (or operators), its output rendered as text only."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from app.core.settings import Settings
from app.store import audit, joblog
from app.store.db import Database
from app.store.models import Job, JobState, aware, utcnow
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.pages import operator_settings, pages_redis_url

__all__ = ["pages_redis_url"]  # the fixture

REPO = "acme/secret"
HOSTILE = (
    "<script>alert('x')</script>\n"
    "<!-- a comment -->\n"
    "```\nfenced\n```\n"
    "\x1b[1;31mred bold\x1b[0m plain \x1b]0;title\x07<img src=x onerror=alert(1)>\n"
)


@pytest.fixture
def settings(
    github_double: GitHubDouble, database_url: str, pages_redis_url: str, tmp_path: Path
) -> Settings:
    github_double.create_repo(REPO, private=True)
    github_double.set_permission(REPO, "alice", "read")
    github_double.user("mallory")
    return operator_settings(github_double, tmp_path, database_url, pages_redis_url)


def a_job(
    db: Database, state: str = JobState.SUCCEEDED, by: tuple[str, int | None] = ("alice", None)
) -> int:
    steps = [
        {"name": "policy", "kind": "deterministic", "state": "succeeded", "duration": 0.5},
        {
            "name": "validate",
            "kind": "deterministic",
            "state": "failed",
            "duration": 1.5,
            "error": "tests failed <b>here</b>",
        },
    ]
    with db.transaction() as s:
        job = Job(
            kind="fix_issue",
            repo=REPO,
            number=7,
            requested_by=by[0],
            requested_by_id=by[1],
            state=state,
            steps=steps,
            result={"pr": 8, "new": "a" * 40},
            check_run_id=991,
            started_at=utcnow(),
            finished_at=utcnow(),
        )
        s.add(job)
        s.flush()
        job_id = job.id
    joblog.append(db, job_id, "$ pytest -q\n" + HOSTILE + "[exit 1]\n", 4096, step="validate")
    audit.record(db, audit.STEP, repo=REPO, job_id=job_id, detail={"name": "<validate>"})
    return job_id


def test_without_a_session_the_page_sends_to_sign_in_and_back(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    client = create_app(settings, db=db).test_client()
    page = open_signed_in(client, github_double, "alice", f"/jobs/{job_id}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert f"Job #{job_id}" in html and "fix_issue" in html and "@alice" in html
    assert f'href="{github_double.url}/{REPO}/issues/7"' in html
    assert f'href="{github_double.url}/{REPO}/pull/8"' in html
    assert f'href="{github_double.url}/{REPO}/runs/991"' in html
    assert f'href="{github_double.url}/{REPO}/commit/{"a" * 40}"' in html
    assert "bar-o-25 bar-w-75" in html  # 0.5 s then 1.5 s: the second bar from 25 % on
    cookie = client.get_cookie("onloop_session")
    assert cookie is not None and cookie.http_only and cookie.same_site == "Lax"
    assert not cookie.secure  # ONLOOP_PUBLIC_URL is http here


def test_output_and_errors_render_as_text_only(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    client = create_app(settings, db=db).test_client()
    html = open_signed_in(client, github_double, "alice", f"/jobs/{job_id}").get_data(as_text=True)
    assert "<script>alert" not in html and "<img" not in html and "<!-- a comment" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "&lt;!-- a comment --&gt;" in html
    assert "```\nfenced\n```" in html
    assert '<span class="ansi-red ansi-bold">red bold</span> plain &lt;img' in html
    assert "\x1b" not in html and "title" not in html.split("<main>")[1].split("[exit 1]")[0]
    assert "tests failed &lt;b&gt;here&lt;/b&gt;" in html
    assert "&#34;&lt;validate&gt;&#34;" in html or "&quot;&lt;validate&gt;&quot;" in html
    scripts = re.findall(r"<script[^>]*>", html)
    assert all("src=" in tag for tag in scripts)  # no inline script, ever


def test_pages_send_a_strict_content_security_policy(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    client = create_app(settings, db=db).test_client()
    page = open_signed_in(client, github_double, "alice", f"/jobs/{job_id}")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    css = client.get("/pages/static/style.css")
    assert css.status_code == 200 and ".bar-w-75 { width: 75%; }" in css.get_data(as_text=True)


def test_a_person_who_cannot_read_the_repository_gets_404_as_for_no_job(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    client = create_app(settings, db=db).test_client()
    page = open_signed_in(client, github_double, "mallory", f"/jobs/{job_id}")
    missing = client.get(f"/jobs/{job_id + 100}")
    assert page.status_code == missing.status_code == 404
    assert page.get_data(as_text=True) == missing.get_data(as_text=True)
    assert REPO not in page.get_data(as_text=True)


def test_an_operator_sees_every_job_without_asking_github(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    github_double.user("olivia")
    client = create_app(settings, db=db).test_client()
    page = open_signed_in(client, github_double, "olivia", f"/jobs/{job_id}")
    assert page.status_code == 200
    assert github_double.calls("GET", f"/repos/{REPO}") == []


def test_read_access_is_asked_once_then_remembered(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    client = create_app(settings, db=db).test_client()
    assert open_signed_in(client, github_double, "alice", f"/jobs/{job_id}").status_code == 200
    assert client.get(f"/jobs/{job_id}").status_code == 200
    asked = github_double.calls("GET", f"/repos/{REPO}")
    assert len([c for c in asked if c.path == f"/repos/{REPO}"]) == 1
    assert {c.identity.login for c in asked} == {"alice"}  # with her own token


def test_the_session_cookie_is_secure_when_onloop_is_served_over_https(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    public = "https://onloop.example"
    https = settings.model_copy(update={"public_url": public})
    github_double.oauth.register_callback(public + "/oauth/callback")
    client = create_app(https, db=db).test_client()
    first = client.get(f"/jobs/{job_id}", base_url=public)
    start = client.get(first.headers["Location"], base_url=public)
    github_double.oauth.user = "alice"
    authorize = requests.get(start.headers["Location"], allow_redirects=False, timeout=10)
    back = client.get(authorize.headers["Location"].removeprefix(public), base_url=public)
    assert back.status_code == 302, back.get_data(as_text=True)
    cookies = [h for h in back.headers.getlist("Set-Cookie") if h.startswith("onloop_session=")]
    assert len(cookies) == 1 and "Secure" in cookies[0] and "HttpOnly" in cookies[0]
    assert "SameSite=Lax" in cookies[0]
    assert client.get(f"/jobs/{job_id}", base_url=public).status_code == 200


@pytest.mark.parametrize(
    "back", ["//evil.example/jobs/1", "/\\evil.example", "https://evil.example/jobs/1", "/oauth/x"]
)
def test_sign_in_never_sends_the_browser_elsewhere(
    settings: Settings, db: Database, github_double: GitHubDouble, back: str
) -> None:
    client = create_app(settings, db=db).test_client()
    start = client.get("/oauth/login", query_string={"next": back})
    github_double.oauth.user = "alice"
    page = requests.get(start.headers["Location"], allow_redirects=False, timeout=10)
    done = client.get(page.headers["Location"])
    assert done.status_code == 200  # the plain "authorised" page, no redirect
    assert client.get_cookie("onloop_session") is not None


def test_the_page_shows_commands_checks_agent_spend_egress_and_the_diff_as_text(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    job_id = a_job(db)
    diff = " a.py | 1 +\n\n+<script>alert(1)</script>\n+```\n"
    result = {
        "outcome": "unvalidated",
        "fixes": ["ruff check --fix ."],
        "checks": {"pytest -q": 1, "ruff check .": 0},
        "violations": ["<b>.github/workflows/ci.yml</b> is denied"],
        "notes": ["setup tried to reach evil.example:443; allow it under sandbox.egress"],
        "diff": diff,
    }
    with db.transaction() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.result, job.agent_tokens_in, job.agent_tokens_out = result, 1200, 300
        job.steps = [*job.steps, {"name": "agent", "kind": "agent", "state": "succeeded"}]
    audit.record_command(db, repo=REPO, job_id=job_id, argv=["ruff", "check", "<x>"], exit_code=1)
    client = create_app(settings, db=db).test_client()
    html = open_signed_in(client, github_double, "alice", f"/jobs/{job_id}").get_data(as_text=True)
    commands = html.split('id="commands"')[1].split("</section>")[0]
    assert "ruff check &#39;&lt;x&gt;&#39;" in commands and '<td class="exit">1</td>' in commands
    checks = html.split('id="checks"')[1].split("</section>")[0]
    assert "pytest -q" in checks and "failed" in checks and "passed" in checks
    agent = html.split('id="agent-tokens"')[1].split("</dd>")[0]
    assert f"1500 of {settings.agent_max_tokens}" in agent
    assert "evil.example:443" in html.split('id="egress"')[1].split("</section>")[0]
    change = html.split('id="diff"')[1].split("</section>")[0]
    assert "The change, not pushed" in change
    assert "&lt;b&gt;.github/workflows/ci.yml&lt;/b&gt; is denied" in change
    assert "+&lt;script&gt;alert(1)&lt;/script&gt;" in change and "<script>alert(1)" not in html


def test_the_timeline_draws_each_step_where_its_record_says_it_began(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    """The bars start at each step's recorded `started` (as the step's span does), so the
    wait between two steps shows as a gap, not as bars back to back."""
    job_id = a_job(db)
    with db.transaction() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.started_at is not None
        begun = aware(job.started_at).timestamp()
        job.finished_at = job.started_at + timedelta(seconds=4)
        job.steps = [
            {
                "name": "policy",
                "kind": "deterministic",
                "state": "succeeded",
                "duration": 1.0,
                "started": begun,
            },
            {
                "name": "validate",
                "kind": "deterministic",
                "state": "succeeded",
                "duration": 1.0,
                "started": begun + 3,
            },
        ]
    client = create_app(settings, db=db).test_client()
    html = open_signed_in(client, github_double, "alice", f"/jobs/{job_id}").get_data(as_text=True)
    assert re.findall(r"bar-o-(\d+) bar-w-(\d+)", html) == [("0", "25"), ("75", "25")]
