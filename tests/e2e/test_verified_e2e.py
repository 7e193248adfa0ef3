"""Verified commits end to end: on a branch that requires signed commits (a ruleset, classic
protection) or where `.github/onloop.yml` says `commits: verified`, a CI fix is made by GitHub
through GraphQL `createCommitOnBranch` as the person and never pushed with git; a rebase
there is refused with the reason, or with `rebase: merge` GitHub merges the base in."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.store import audit
from app.store.models import AuditEntry, JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.payloads import workflow_run_failed
from tests.e2e import world as e2e
from tests.e2e.test_fix_e2e import BAD, PYPROJECT, failing_run, tree_at
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
OWN = "onloop/issue-1"  # a PR onloop opened for alice: onloop may push to its branch


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    """A Python repository; PR #1 from `onloop/issue-1` and PR #2 from `feature`, both by
    alice and both adding the lint failure bad.py."""
    files: dict[str, str | bytes] = {"pyproject.toml": PYPROJECT, "README.md": "widgets\n"}
    for world in e2e.make_world(github_double, database_url, tmp_path, files, sandbox_pool_size=0):
        for branch in (OWN, "feature"):
            github_double.create_branch(REPO, branch)
            github_double.commit(REPO, branch, {"bad.py": BAD}, message="Add bad.py")
            github_double.create_pull(REPO, branch, title=branch, user="alice")
        yield world


def show(double: GitHubDouble, fmt: str, sha: str) -> str:
    return subprocess.run(
        ["git", "show", "-s", f"--format={fmt}", sha],
        cwd=double.git_dir(REPO),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def receive_packs(double: GitHubDouble) -> list[str]:
    """The git pushes anyone tried against the repository (answered or not)."""
    return [c.path for c in double.calls(surface="git") if "git-receive-pack" in c.path]


def fix_ci(world: World, branch: str, number: int) -> tuple[str, str, int]:
    """A failed lint run on `branch` and the automatic fix; the old and new heads, the job."""
    world.authorize("alice")
    old = world.double.branch_sha(REPO, branch)
    assert old is not None
    run = failing_run(world, branch)
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(world.double, REPO, run, number))
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    new = world.double.branch_sha(REPO, branch)
    assert new is not None and new != old
    return old, new, job_id


def assert_made_by_github(world: World, old: str, new: str, job_id: int, tmp_path: Path) -> None:
    double = world.double
    assert new in double.verified  # signed by GitHub: Verified
    assert show(double, "%an%n%P", new).split("\n") == ["alice", old]  # the person's commit
    assert f"Onloop-Job: {job_id}" in show(double, "%B", new)
    assert not double.pushes and not receive_packs(double)  # a git push was never tried
    graphql = [c for c in double.calls("POST", "/api/graphql") if c.status == 200]
    assert len(graphql) == 1 and graphql[0].identity.login == "alice"
    assert graphql[0].json["variables"]["input"]["expectedHeadOid"] == old
    files = tree_at(double, new, tmp_path / "after")
    assert "import os" not in (files / "bad.py").read_text()
    job = world.job(job_id)
    assert job.head_sha == new and job.result["new"] == new  # GitHub's sha, not the sandbox's
    with world.db.read() as s:
        pushed = s.scalars(select(AuditEntry).where(AuditEntry.action == audit.GIT_PUSH)).all()
        assert [(p.detail["old"], p.detail["new"], p.detail["via"]) for p in pushed] == [
            (old, new, "createCommitOnBranch")
        ]


@pytest.mark.parametrize("rule", ["ruleset", "protection"])
def test_a_ci_fix_on_a_branch_requiring_signatures_is_a_verified_commit(
    world: World, rule: str, tmp_path: Path
) -> None:
    double = world.double
    if rule == "ruleset":
        double.protections.add_ruleset(REPO, ["onloop/*"], ["required_signatures"])
    else:
        # Classic protection is readable only through an App granted `administration:
        # read`, by a person who administers the repository (onloop's job tokens never are).
        double.protections.require_signatures(REPO, OWN)
        for inst in double.installations.values():
            inst.permissions["administration"] = "read"
        double.set_permission(REPO, "alice", "admin")
    old, new, job_id = fix_ci(world, OWN, 1)
    assert_made_by_github(world, old, new, job_id, tmp_path)


def test_commits_verified_in_the_config_does_the_same_on_an_unprotected_branch(
    world: World, tmp_path: Path
) -> None:
    world.double.commit(REPO, "main", {".github/onloop.yml": "commits: verified\n"})
    old, new, job_id = fix_ci(world, "feature", 2)
    assert_made_by_github(world, old, new, job_id, tmp_path)


def test_a_rebase_there_is_refused_with_the_reason(world: World) -> None:
    world.authorize("alice")
    world.double.commit(REPO, "main", {".github/onloop.yml": "commits: verified\n"})
    head = world.double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice", 2))
    assert job.state == JobState.FAILED and job.result["outcome"] == "unverifiable", job.result
    assert "rebase" not in [s["name"] for s in job.steps]  # refused before any sandbox work
    assert world.double.branch_sha(REPO, "feature") == head and not world.double.pushes
    status = world.final_status(job.id, 2).body
    assert "takes only verified commits" in status and "`rebase: merge`" in status


def test_with_rebase_merge_github_merges_the_base_in(world: World) -> None:
    double = world.double
    world.authorize("alice")
    config = {".github/onloop.yml": "commits: verified\nrebase: merge\n"}
    double.commit(REPO, "main", config, message="Verified commits")
    main = double.branch_sha(REPO, "main")
    head = double.branch_sha(REPO, "feature")
    job = world.wait(world.comment("/agent rebase", "alice", 2))
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "merged", job.result
    new = double.branch_sha(REPO, "feature")
    assert new is not None and new == job.result["new"] and new in double.verified
    assert show(double, "%an%n%P", new).split("\n") == ["alice", f"{head} {main}"]
    assert not double.pushes and not receive_packs(double)
    (merge,) = double.branch_merges
    assert (merge.base, merge.head, merge.login) == ("feature", main, "alice")
    said = [c for c in double.comments(REPO, 2) if c.user == "alice"]
    assert any("Merged `main` into `feature`" in c.body for c in said)


def test_a_fix_on_a_new_branch_starts_it_at_the_base_then_commits_verified(world: World) -> None:
    double = world.double
    double.protections.add_ruleset(REPO, ["~ALL"], ["required_signatures"])
    world.authorize("alice")
    head = double.branch_sha(REPO, "feature")
    run = failing_run(world, "feature")
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(double, REPO, run, 2))
    job = world.wait(job_id)
    # `feature` has GitHub's protected flag, so the fix goes to a new branch and a PR into it.
    assert job.state == JobState.SUCCEEDED and job.result["outcome"] == "pr", job.result
    branch = f"onloop/fix-ci-2-{job_id}"
    new = double.branch_sha(REPO, branch)
    assert new is not None and new in double.verified and job.result["new"] == new
    assert show(double, "%an%n%P", new).split("\n") == ["alice", head]
    (created,) = [c for c in double.calls("POST", f"/repos/{REPO}/git/refs") if c.status == 201]
    assert created.json == {"ref": f"refs/heads/{branch}", "sha": head}
    assert created.identity.login == "alice"
    assert double.branch_sha(REPO, "feature") == head
    assert not double.pushes and not receive_packs(double)


def test_classic_protection_onloop_cannot_read_says_what_to_do_when_github_refuses(
    world: World,
) -> None:
    double = world.double
    double.protections.require_signatures(REPO, OWN)  # the App has no administration: read
    world.authorize("alice")
    head = double.branch_sha(REPO, OWN)
    run = failing_run(world, OWN)
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(double, REPO, run, 1))
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["outcome"] == "unsigned", job.result
    assert double.branch_sha(REPO, OWN) == head and receive_packs(double)  # git was tried
    status = world.final_status(job_id, 1).body
    assert "requires signed commits" in status and "`commits: verified`" in status
