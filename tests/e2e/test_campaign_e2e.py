"""A campaign end to end: 30 repositories on the double, a real worker (the local sandbox),
the CLI; pacing, a dependency pair, the tracking issue, sibling links, re-run and close."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from app.store import campaigns
from app.store.fleet_tables import RepoState
from tests.doubles.campaign_fleet import Fleet, Member
from tests.doubles.github.double import GitHubDouble
from tests.doubles.oauth_flow import open_signed_in
from tests.doubles.worker_proc import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("bwrap"), reason="the local sandbox needs bubblewrap"),
]
BRANCH = "onloop/campaign-bump"
SERVICES = [f"octo/svc-{n:02d}" for n in range(1, 27)]
REPOS = ["octo/lib", "octo/app", *SERVICES, "octo/docs-only", "octo/locked"]
CAMPAIGN = """\
name: bump
owner: alice
repositories:
  - lib
  - app
  - octo/svc-*
  - topic:docs
  - octo/locked
change:
  run:
    - sed -i 's/1.0/1.1/' version.py
title: "Bump to 1.1 (${campaign})"
body: "Bumps the version in ${repository}."
pacing:
  max_open_prs: 10
depends_on:
  octo/app: [octo/lib]
issue_repository: octo/campaigns
"""


def member(name: str) -> Member:
    version = "2.0" if name == "octo/docs-only" else "1.0"
    return Member(
        {"version.py": f'VERSION = "{version}"\n'},
        role="read" if name == "octo/locked" else "write",
        topics=("docs",) if name == "octo/docs-only" else (),
    )


@pytest.fixture
def fleet(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(github_double, database_url, tmp_path, {name: member(name) for name in REPOS})
    (tmp_path / "bump.yml").write_text(CAMPAIGN)
    yield made
    made.close()


def campaign_pulls(double: GitHubDouble, repo: str) -> list[Any]:
    return [i for i in double.repo(repo).issues.values() if i.pull and i.pull.head_ref == BRANCH]


def test_a_campaign_over_thirty_repositories(fleet: Fleet) -> None:
    double = fleet.double
    assert "campaign started: 30 repositories, 1 skipped" in fleet.cli(
        "start", str(fleet.root / "bump.yml")
    )
    merged_at: dict[str, float] = {}
    while True:  # merge whatever is open once the batch settled, until nothing is left
        rows = wait_until(partial(fleet.settled, "bump"), 120, "the campaign's batch to settle")
        waiting = [
            r for r in rows.values() if r.state in (RepoState.QUEUED, "waiting_on_dependency")
        ]
        if not waiting:
            break
        opened = [r for r in rows.values() if r.state == RepoState.PR_OPEN]
        assert opened, {r.repo: (r.state, r.reason) for r in rows.values()}
        for row in opened:
            assert row.pr_number is not None
            fleet.merge(row.repo, row.pr_number)
            merged_at[row.repo] = double.pull_log[-1].at
        wait_until(
            lambda: (
                fleet.settled("bump")
                and not any(
                    r.state == RepoState.PR_OPEN and r.repo in merged_at
                    for r in fleet.rows("bump").values()
                )
            ),
            60,
            "the merges to be seen",
        )

    rows = fleet.rows("bump")
    unsettled = {
        n: (r.state, r.reason)
        for n, r in rows.items()
        if r.state not in (RepoState.PR_OPEN, RepoState.MERGED) and n in REPOS[:-2]
    }
    assert not unsettled, unsettled
    assert rows["octo/locked"].state == RepoState.SKIPPED
    assert "@alice has read access" in (rows["octo/locked"].reason or "")
    assert rows["octo/docs-only"].state == RepoState.NOTHING_TO_CHANGE
    assert not campaign_pulls(double, "octo/docs-only") and not campaign_pulls(
        double, "octo/locked"
    )
    # pacing: never more than 10 open at once, and the cap was reached
    assert double.most_open_pulls() == 10
    # the dependent PR opened only after its dependency's merged
    (lib_pr,) = campaign_pulls(double, "octo/lib")
    (app_pr,) = campaign_pulls(double, "octo/app")
    lib_merged = [e.at for e in double.pull_log if e.repo == "octo/lib" and e.action == "merged"]
    app_opened = [e.at for e in double.pull_log if e.repo == "octo/app" and e.action == "opened"]
    assert lib_merged and app_opened and app_opened[0] > lib_merged[0]
    assert lib_pr.number and app_pr.number
    # every PR: the owner's, on the campaign's branch, rendered, with its siblings linked
    pulls = {name: campaign_pulls(double, name) for name in REPOS[:-2]}
    assert all(len(found) == 1 for found in pulls.values()), {
        n: [(p.number, p.state, p.pull and p.pull.merged) for p in f]
        for n, f in pulls.items()
        if len(f) != 1
    }
    still_open = {n: p[0] for n, p in pulls.items() if p[0].state == "open"}
    assert still_open and len(still_open) <= 10
    for name, (pr,) in pulls.items():
        assert pr.user == "alice" and pr.title == "Bump to 1.1 (bump)"
        assert f"Bumps the version in {name}." in (pr.body or "")
    for name, pr in still_open.items():
        links = set(re.findall(r"\[(octo/[\w-]+)#(\d+)\]", pr.body or ""))
        others = {(n, str(p[0].number)) for n, p in pulls.items() if n != name}
        assert links == others, (name, others - links)
    for push in double.pushes:
        assert push.identity.login == "alice"
        assert [u.ref for u in push.updates] == [f"refs/heads/{BRANCH}"]
    # the tracking issue: one, comment-free, edited in place, as the double says
    (issue,) = double.repo("octo/campaigns").issues.values()
    assert issue.user == double.app.bot_login and not double.comments(
        "octo/campaigns", issue.number
    )
    assert double.calls("PATCH", f"/repos/octo/campaigns/issues/{issue.number}")
    table = dict(re.findall(r"^\| (octo/[\w-]+) \| (.+) \|$", issue.body or "", re.MULTILINE))
    assert set(table) == set(REPOS)
    for name, found in pulls.items():
        (pr,) = found
        word = "merged" if pr.pull.merged else "PR open"
        assert table[name].startswith(f"{word} [{name}#{pr.number}]"), table[name]
    assert table["octo/docs-only"] == "nothing to change"
    metrics = fleet.client.get("/metrics").get_data(as_text=True)
    merged = sum(1 for found in pulls.values() if found[0].pull.merged)
    labels = 'campaign="bump",campaign_state="active"'
    assert f'onloop_campaign_repositories{{{labels},state="merged"}} {merged}.0' in metrics
    assert table["octo/locked"].startswith("skipped: @\u200balice has read access")

    # re-running the same file changes nothing on GitHub
    jobs, log, pushes = fleet.jobs(), list(double.pull_log), len(double.pushes)
    body = issue.body
    assert "campaign updated" in fleet.cli("start", str(fleet.root / "bump.yml"))
    wait_until(partial(fleet.settled, "bump"), 30, "the re-run to settle")
    assert (fleet.jobs(), double.pull_log, len(double.pushes)) == (jobs, log, pushes)
    assert issue.body == body and len(double.repo("octo/campaigns").issues) == 1

    # close: what is unmerged closes, with a comment in alice's name
    said = fleet.cli("close", "bump")
    assert f"{len(still_open)} pull requests closed" in said
    for name, pr in still_open.items():
        assert pr.state == "closed" and not pr.pull.merged
        (comment,) = double.comments(name, pr.number)
        assert comment.user == "alice" and "campaign **bump** was closed" in comment.body
        assert fleet.rows("bump")[name].state == RepoState.CLOSED
    found = campaigns.by_name(fleet.db, "bump")
    assert found is not None
    page = open_signed_in(fleet.client, double, "alice", f"/campaigns/{found.id}")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and html.count('class="campaign-row') == len(REPOS)
    assert 'id="campaign-state">closed<' in html
    status = fleet.cli("status", "bump")
    assert "bump (closed), by @alice" in status and "octo/locked: skipped" in status


SLOW = """\
name: slow
owner: alice
repositories: [octo/one]
change:
  run:
    - sleep 6
    - sed -i 's/1.0/1.1/' version.py
issue_repository: octo/campaigns
"""


@pytest.fixture
def one(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    made = Fleet(github_double, database_url, tmp_path, {"octo/one": member("octo/one")})
    (tmp_path / "slow.yml").write_text(SLOW)
    yield made
    made.close()


def test_a_job_running_when_its_campaign_is_cancelled_pushes_and_opens_nothing(
    one: Fleet,
) -> None:
    one.cli("start", str(one.root / "slow.yml"))
    found = campaigns.by_name(one.db, "slow")
    assert found is not None
    (row,) = one.rows("slow").values()
    assert row.job_id is not None
    wait_until(lambda: one.job(row.job_id).state == "running", 60, "the job to start")
    one.cli("cancel", "slow")  # while its commands run: a running job is not stopped
    wait_until(partial(one.settled, "slow"), 90, "the job to end")
    job = one.job(row.job_id)
    assert job.state == "failed" and "pushed and opened nothing" in job.result["error"]
    (after,) = one.rows("slow").values()
    assert after.state == RepoState.SKIPPED and "cancelled" in (after.reason or "")
    assert not one.double.pushes and not campaign_pulls(one.double, "octo/one")
