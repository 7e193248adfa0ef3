"""/jobs: the jobs a signed-in person may see (operators: all), newest first, 50 a page,
filtered by repository, kind, state, person and dates; and the header every page carries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.policy import governance
from app.store.db import Database
from app.store.models import Installation, Job, JobState
from app.web import create_app
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.pages import operator_settings, pages_redis_url

__all__ = ["pages_redis_url"]  # the fixture

SECRET, OPEN, HIDDEN = "acme/secret", "acme/open", "umbrella/hidden"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def settings(
    github_double: GitHubDouble, database_url: str, pages_redis_url: str, tmp_path: Path
) -> Settings:
    for repo in (SECRET, OPEN, HIDDEN):
        github_double.create_repo(repo, private=True)
    github_double.set_permission(SECRET, "alice", "read")
    github_double.set_permission(OPEN, "alice", "write")
    github_double.user("mallory")
    github_double.user("olivia")
    return operator_settings(github_double, tmp_path, database_url, pages_redis_url)


def add_jobs(db: Database, *specs: dict[str, Any]) -> list[int]:
    """Jobs from `specs` (Job's columns), in one transaction; their ids in order."""
    with db.transaction() as s:
        jobs = [
            Job(
                **{
                    "kind": "fix_issue",
                    "repo": SECRET,
                    "number": 7,
                    "requested_by": "alice",
                    "state": JobState.SUCCEEDED,
                    "installation_id": 1,
                    "created_at": T0,
                    **spec,
                }
            )
            for spec in specs
        ]
        s.add_all(jobs)
        s.flush()
        return [job.id for job in jobs]


def listed(html: str) -> list[int]:
    """The job ids of the list's rows, top to bottom."""
    return [int(n) for n in re.findall(r'<tr class="job-row[^"]*" id="job-(\d+)"', html)]


def page(client: Any, double: GitHubDouble, login: str, query: str = "") -> str:
    first = open_signed_in(client, double, login, "/jobs")
    assert first.status_code == 200, first.get_data(as_text=True)
    if not query:
        return str(first.get_data(as_text=True))
    answer = client.get("/jobs?" + query)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return str(answer.get_data(as_text=True))


def test_a_person_sees_only_the_jobs_of_repositories_they_can_read(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    secret, open_, hidden = add_jobs(
        db,
        {"repo": SECRET, "created_at": T0},
        {"repo": OPEN, "created_at": T0 + timedelta(hours=1), "number": 9},
        {"repo": HIDDEN, "created_at": T0 + timedelta(hours=2)},
    )
    client = create_app(settings, db=db).test_client()
    html = page(client, github_double, "alice")
    assert listed(html) == [open_, secret]  # newest first; umbrella/hidden left out
    assert HIDDEN not in html
    assert f'<a href="/jobs/{open_}">#{open_}</a>' in html
    assert f'href="{github_double.url}/{OPEN}/issues/9"' in html
    assert client.get(f"/jobs/{hidden}").status_code == 404
    assert client.get(f"/jobs/{open_}").status_code == 200
    # asking for the hidden repository by name shows nothing either
    assert listed(str(client.get(f"/jobs?repo={HIDDEN}").get_data(as_text=True))) == []

    mallory = create_app(settings, db=db).test_client()
    assert listed(page(mallory, github_double, "mallory")) == []


def test_access_is_asked_once_per_repository_not_per_row(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    add_jobs(db, *({"repo": SECRET, "created_at": T0 + timedelta(minutes=i)} for i in range(12)))
    client = create_app(settings, db=db).test_client()
    assert len(listed(page(client, github_double, "alice"))) == 12
    assert len(listed(str(client.get("/jobs").get_data(as_text=True)))) == 12  # cached now
    asked = [
        c for c in github_double.calls("GET", f"/repos/{SECRET}") if c.path == f"/repos/{SECRET}"
    ]
    assert len(asked) == 1 and asked[0].identity.login == "alice"


def test_an_operator_sees_every_job_without_asking_github(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    ids = add_jobs(
        db,
        {"repo": SECRET, "created_at": T0},
        {"repo": HIDDEN, "created_at": T0 + timedelta(hours=1)},
    )
    client = create_app(settings, db=db).test_client()
    assert listed(page(client, github_double, "olivia")) == ids[::-1]
    assert [c for c in github_double.calls("GET") if c.path.startswith("/repos/")] == []


def test_fifty_a_page_newest_first_with_links_between_pages(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    ids = add_jobs(db, *({"created_at": T0 + timedelta(minutes=i)} for i in range(120)))
    newest = ids[::-1]
    client = create_app(settings, db=db).test_client()
    first = page(client, github_double, "alice")
    assert listed(first) == newest[:50]
    assert 'id="page-older"' in first and 'id="page-newer"' not in first
    second = str(client.get("/jobs?page=2").get_data(as_text=True))
    assert listed(second) == newest[50:100]
    assert 'href="/jobs?page=3"' in second and 'href="/jobs"' in second
    third = str(client.get("/jobs?page=3").get_data(as_text=True))
    assert listed(third) == newest[100:]
    assert 'id="page-older"' not in third and 'href="/jobs?page=2"' in third
    assert listed(str(client.get("/jobs?page=4").get_data(as_text=True))) == []
    filtered = str(client.get("/jobs?kind=fix_issue&person=alice").get_data(as_text=True))
    assert 'href="/jobs?kind=fix_issue&amp;person=alice&amp;page=2"' in filtered  # kept


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("repo=ACME/open", {"open"}),
        ("kind=review_pr", {"review"}),
        ("state=failed", {"failed"}),
        ("person=%40Bob", {"bob"}),
        ("since=2026-11-03", {"late"}),
        ("until=2026-11-01", {"base", "open", "review", "failed", "bob"}),
        ("since=2026-11-02&until=2026-11-02", {"middle"}),
        ("since=2026-11-03&until=9999-12-31", {"late"}),
        (
            "kind=fix_issue&state=succeeded&repo=acme/secret&until=2026-11-02",
            {"base", "bob", "middle"},
        ),
    ],
)
def test_each_filter_narrows_the_list(
    settings: Settings,
    db: Database,
    github_double: GitHubDouble,
    query: str,
    wanted: set[str],
) -> None:
    named = {
        "base": {},
        "open": {"repo": OPEN},
        "review": {"kind": "review_pr"},
        "failed": {"state": JobState.FAILED, "result": {"error": "tests failed"}},
        "bob": {"requested_by": "bob"},
        "middle": {"created_at": T0 + timedelta(days=1)},
        "late": {"created_at": T0 + timedelta(days=2, hours=11)},
    }
    ids = dict(zip(named, add_jobs(db, *named.values()), strict=True))
    client = create_app(settings, db=db).test_client()
    html = page(client, github_double, "olivia", query)
    assert set(listed(html)) == {ids[name] for name in wanted}
    # the form keeps what was asked, and the pages keep the filters
    for key, value in (pair.split("=") for pair in query.split("&")):
        if key in ("kind", "state"):
            assert f'<option value="{value}" selected>' in html


@pytest.mark.parametrize(
    "query", ["kind=nonsense", "state=done", "since=yesterday", "until=2026-13-01", "page=0"]
)
def test_a_filter_that_cannot_be_used_is_a_400_that_says_why(
    settings: Settings, db: Database, github_double: GitHubDouble, query: str
) -> None:
    client = create_app(settings, db=db).test_client()
    page(client, github_double, "alice")
    answer = client.get("/jobs?" + query)
    assert answer.status_code == 400
    assert query.split("=")[0] in answer.get_data(as_text=True)


def test_rows_show_outcome_duration_and_escape_what_they_show(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    (failed, done, live) = add_jobs(
        db,
        {
            "state": JobState.FAILED,
            "result": {"error": "<script>alert(1)</script>\nmore"},
            "started_at": T0,
            "finished_at": T0 + timedelta(seconds=75),
        },
        {
            "state": JobState.SUCCEEDED,
            "result": {"outcome": "pushed"},
            "started_at": T0,
            "finished_at": T0 + timedelta(seconds=4.5),
            "created_at": T0 + timedelta(minutes=1),
        },
        {"state": JobState.RUNNING, "started_at": T0, "created_at": T0 + timedelta(minutes=2)},
    )
    client = create_app(settings, db=db).test_client()
    html = page(client, github_double, "alice")
    rows = dict(zip(listed(html), html.split('<tr class="job-row')[1:], strict=True))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rows[failed] and "<script>alert" not in html
    assert "more" not in rows[failed]  # the error's first line only
    assert "1 min 15 s" in rows[failed]
    assert '<td class="job-outcome">pushed</td>' in rows[done] and "4.5 s" in rows[done]
    assert '<td class="job-duration">running</td>' in rows[live]
    assert "2026-11-01 12:01 UTC" in rows[done]


def header_of(html: str) -> str:
    return html.split('<header class="top">')[1].split("</header>")[0]


def test_the_header_shows_pause_state_and_load_against_the_caps(
    settings: Settings, db: Database, github_double: GitHubDouble
) -> None:
    with db.transaction() as s:
        s.add(Installation(id=1, account_login="acme"))
        s.add(Installation(id=2, account_login="umbrella"))
    ids = add_jobs(
        db,
        {"state": JobState.RUNNING},
        {"state": JobState.RUNNING, "repo": OPEN},
        {"state": JobState.QUEUED},
        {"state": JobState.QUEUED},
        {"state": JobState.QUEUED},
        {"state": JobState.SUCCEEDED},
        {"state": JobState.RUNNING, "repo": HIDDEN, "installation_id": 2},
    )
    governance.pause(db, governance.INSTALLATION, "2", reason="<b>incident</b>", by="olivia")
    governance.pause(db, governance.REPO, OPEN, by="olivia")
    capped = settings.model_copy(update={"max_jobs_per_installation": 4})

    client = create_app(capped, db=db).test_client()
    top = header_of(page(client, github_double, "olivia"))
    assert 'href="/jobs" id="nav-jobs"' in top and 'href="/insights" id="nav-insights"' in top
    acme = top.split('id="installation-1"')[1].split('id="installation-2"')[0]
    umbrella = top.split('id="installation-2"')[1]
    assert '<span class="pause-state">active</span>' in acme
    assert 'running <b class="n">2</b>/<b class="cap">4</b>' in acme
    assert 'queued <b class="n">3</b>' in acme and "1 repo paused" in acme
    assert "paused: &lt;b&gt;incident&lt;/b&gt;" in umbrella and "<b>incident" not in top
    assert 'running <b class="n">1</b>/<b class="cap">4</b>' in umbrella
    assert 'data-running="3" data-queued="3"' in top

    # alice reads acme's repositories only: umbrella is not in her header, here or on a page
    alice = create_app(capped, db=db).test_client()
    for html in (
        page(alice, github_double, "alice"),
        str(alice.get(f"/jobs/{ids[0]}").get_data(as_text=True)),
    ):
        top = header_of(html)
        assert 'id="installation-1"' in top and "umbrella" not in top
        assert 'data-running="2" data-queued="3"' in top
