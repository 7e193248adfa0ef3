"""Where onloop may push (tasks/blueprints/targets.py), read from the GitHub double's branch
protection and rulesets; and the double's git refusing pushes as GitHub's pre-receive does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from github import Auth, Github
from github.Repository import Repository

from tasks.blueprints.targets import Refusal, push_target
from tests.doubles.github import GitHubDouble

REPO = "octo/hello"


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo(REPO, files={"README.md": "hi\n"})
    for branch in ("release", "feature", "onloop/issue-1"):
        github_double.create_branch(REPO, branch)
    github_double.set_permission(REPO, "alice", "admin")
    return github_double


def installation_repo(double: GitHubDouble) -> Repository:
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id).value
    client = Github(auth=Auth.Token(token), base_url=double.api_url, retry=0)
    return client.get_repo(REPO)


def test_default_protected_and_ruleset_branches_are_refused(double: GitHubDouble) -> None:
    double.protections.protect(REPO, "release")
    double.protections.add_ruleset(REPO, ["feature"], ["non_fast_forward", "max_file_size"])
    repo = installation_repo(double)
    assert push_target(repo, "main").refusal == Refusal.DEFAULT_BRANCH
    assert push_target(repo, "release").refusal == Refusal.PROTECTED
    ruled = push_target(repo, "feature")
    assert (ruled.refusal, ruled.rules) == (Refusal.RULESET, ("non_fast_forward",))
    assert "ruleset (non_fast_forward)" in ruled.message()
    assert push_target(repo, "onloop/issue-1").allowed
    assert push_target(repo, "not-yet-made").allowed


def test_content_rules_leave_onloop_branches_pushable_but_not_peoples(
    double: GitHubDouble,
) -> None:
    # An organisation's content rules on every branch set GitHub's `protected` flag too.
    double.protections.add_ruleset(REPO, ["~ALL"], ["max_file_size", "commit_message_pattern"])
    repo = installation_repo(double)
    assert repo.get_branch("onloop/issue-1").protected
    assert push_target(repo, "onloop/issue-1").allowed
    assert push_target(repo, "onloop/fix-ci-3-9").allowed  # a new one of its own
    assert push_target(repo, "feature").refusal == Refusal.PROTECTED


def test_a_ruleset_on_onloop_branches_refuses_them(double: GitHubDouble) -> None:
    double.protections.add_ruleset(REPO, ["onloop/*"], ["creation", "update"])
    double.protections.add_ruleset(REPO, ["feature"], ["update"], enforcement="evaluate")
    repo = installation_repo(double)
    target = push_target(repo, "onloop/fix-ci-3-9")
    assert target.refusal == Refusal.RULESET and target.rules == ("creation", "update")
    assert push_target(repo, "feature").allowed  # only active rulesets count


def _push(double: GitHubDouble, tmp_path: Path, branch: str, *, force: bool = False) -> str:
    env = double.git_env(double.issue_user_token("alice"))
    work = tmp_path / f"work-{branch.replace('/', '-')}-{force}"
    subprocess.run(["git", "clone", "-q", double.clone_url(REPO), str(work)], env=env, check=True)
    subprocess.run(["git", "checkout", "-q", "-B", "x", "origin/main"], cwd=work, env=env)
    if force:
        subprocess.run(["git", "commit", "-q", "--amend", "-m", "rewritten"], cwd=work, env=env)
    else:
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "more"], cwd=work, env=env)
    done = subprocess.run(
        ["git", "push", "--force", "origin", f"HEAD:refs/heads/{branch}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    return "pushed" if done.returncode == 0 else done.stderr


def test_the_doubles_git_refuses_pushes_as_github_does(
    double: GitHubDouble, tmp_path: Path
) -> None:
    double.protections.protect(REPO, "release")
    double.protections.add_ruleset(REPO, ["feature"], ["non_fast_forward"])
    double.protections.add_ruleset(REPO, ["~DEFAULT_BRANCH"], ["update"])
    before = {b: double.branch_sha(REPO, b) for b in ("main", "release", "feature")}
    assert "GH006: Protected branch update failed" in _push(double, tmp_path, "release")
    assert "GH013: Repository rule violations" in _push(double, tmp_path, "main")
    assert "GH013" in _push(double, tmp_path, "feature", force=True)
    assert {b: double.branch_sha(REPO, b) for b in before} == before and not double.pushes
    assert _push(double, tmp_path, "feature") == "pushed"  # a fast-forward is no force-push
    assert _push(double, tmp_path, "onloop/issue-1", force=True) == "pushed"
