"""Branches that require signed commits (tasks/blueprints/targets.py), read from the GitHub
double: allowed, with where the requirement comes from; and the double's REST refs and merges
that onloop's verified path uses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from github import Auth, Github, GithubException
from github.Repository import Repository

from app.github.signed_commits import CommitRefused, StaleHead, create_commit_on_branch
from tasks.blueprints.targets import Refusal, Signatures, push_target, rejected_as_unsigned
from tasks.git.file_changes import FileChanges
from tests.doubles.github import GitHubDouble

REPO = "octo/hello"


@pytest.fixture
def double(github_double: GitHubDouble) -> GitHubDouble:
    github_double.create_repo(REPO, files={"README.md": "hi\n"})
    for branch in ("feature", "onloop/issue-1"):
        github_double.create_branch(REPO, branch)
    github_double.set_permission(REPO, "alice", "admin")
    github_double.set_permission(REPO, "bob", "write")
    return github_double


def installation_repo(double: GitHubDouble) -> Repository:
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id).value
    return Github(auth=Auth.Token(token), base_url=double.api_url, retry=0).get_repo(REPO)


def user_repo(double: GitHubDouble, login: str) -> Repository:
    token = double.issue_user_token(login)
    return Github(auth=Auth.Token(token), base_url=double.api_url, retry=0).get_repo(REPO)


def test_a_rulesets_required_signatures_no_longer_refuses_but_says_so(
    double: GitHubDouble,
) -> None:
    double.protections.add_ruleset(REPO, ["~ALL"], ["required_signatures", "max_file_size"])
    repo = installation_repo(double)
    own = push_target(repo, "onloop/issue-1")
    assert own.allowed and own.signatures == Signatures.RULESET and own.signatures.required
    fresh = push_target(repo, "onloop/fix-ci-3-9")  # not made yet: the rules still apply
    assert fresh.allowed and fresh.signatures == Signatures.RULESET
    # A person's branch with GitHub's `protected` flag stays refused: the flag may come from
    # classic protection that onloop cannot read.
    assert push_target(repo, "feature").refusal == Refusal.PROTECTED
    double.protections.add_ruleset(REPO, ["onloop/*"], ["update"])
    assert push_target(repo, "onloop/issue-1").refusal == Refusal.RULESET


def test_classic_signature_protection_is_read_where_the_token_may(double: GitHubDouble) -> None:
    double.protections.require_signatures(REPO, "onloop/issue-1")
    # The job's installation token lacks `administration: read`: onloop cannot tell.
    assert push_target(installation_repo(double), "onloop/issue-1").signatures == (
        Signatures.UNKNOWN
    )
    inst = next(i for i in double.installations.values() if i.account == "octo")
    inst.permissions["administration"] = "read"
    # An administrator's token through an App granted it reads "Require signed commits".
    signed = push_target(user_repo(double, "alice"), "onloop/issue-1")
    assert signed.allowed and signed.signatures == Signatures.PROTECTION
    assert push_target(user_repo(double, "bob"), "onloop/issue-1").signatures == (
        Signatures.UNKNOWN  # bob may write, not administer
    )
    unprotected = push_target(user_repo(double, "alice"), "onloop/issue-2")
    assert unprotected.signatures == Signatures.NOT_REQUIRED


def test_an_unforeseen_signature_refusal_says_what_to_do(
    double: GitHubDouble, tmp_path: Path
) -> None:
    double.protections.require_signatures(REPO, "onloop/issue-1")
    double.protections.protect(REPO, "feature")
    env = double.git_env(double.issue_user_token("alice"))
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", double.clone_url(REPO), str(work)], env=env, check=True)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=work, env=env)

    def push(branch: str) -> str:
        return subprocess.run(
            ["git", "push", "origin", f"HEAD:refs/heads/{branch}"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        ).stderr

    said = rejected_as_unsigned("onloop/issue-1", push("onloop/issue-1"))
    assert said is not None and "requires signed commits" in said
    assert "`commits: verified`" in said and "administration: read" in said
    assert rejected_as_unsigned("feature", push("feature")) is None  # protected, not unsigned


def test_the_doubles_refs_and_merges_are_made_and_signed_by_github(
    double: GitHubDouble,
) -> None:
    double.commit(REPO, "main", {"lib.py": "A = 1\n"}, message="Move main")
    main = double.branch_sha(REPO, "main")
    feature = double.branch_sha(REPO, "feature")
    repo = user_repo(double, "alice")
    repo.create_git_ref("refs/heads/onloop/new", feature or "")
    assert double.branch_sha(REPO, "onloop/new") == feature
    with pytest.raises(GithubException) as taken:
        repo.create_git_ref("refs/heads/onloop/new", feature or "")
    assert taken.value.status == 422

    made = repo.merge("feature", "main", "Merge main into feature")
    assert made is not None and double.branch_sha(REPO, "feature") == made.sha
    assert made.sha in double.verified
    assert [p.sha for p in made.parents] == [feature, main]
    assert made.commit.author.name == "alice"
    (merge,) = double.branch_merges
    assert (merge.base, merge.head, merge.login) == ("feature", "main", "alice")
    assert repo.merge("feature", "main") is None  # already merged: 204
    assert not double.merges and not double.pushes  # no PR merged, nothing pushed

    double.commit(REPO, "main", {"lib.py": "A = 2\n"}, message="Main again")
    double.commit(REPO, "feature", {"lib.py": "A = 3\n"}, message="Feature's own")
    with pytest.raises(GithubException) as conflict:
        repo.merge("feature", "main")
    assert conflict.value.status == 409


def test_create_commit_on_branch_says_stale_when_the_branch_moved(double: GitHubDouble) -> None:
    client = Github(auth=Auth.Token(double.issue_user_token("alice")), base_url=double.api_url)
    head = double.branch_sha(REPO, "feature") or ""
    given = FileChanges("Add a", "Onloop-Job: 1", [{"path": "a", "contents": "YQo="}])
    made = create_commit_on_branch(client, given.mutation_input(REPO, "feature", head))
    assert double.branch_sha(REPO, "feature") == made and made in double.verified
    with pytest.raises(StaleHead):  # `head` is no longer the branch's: nothing is made
        create_commit_on_branch(client, given.mutation_input(REPO, "feature", head))
    assert double.branch_sha(REPO, "feature") == made
    with pytest.raises(CommitRefused, match="does not exist"):
        create_commit_on_branch(client, given.mutation_input(REPO, "nowhere", head))
