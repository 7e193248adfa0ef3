"""The GitHub double's "Require signed commits": classic protection and a ruleset's
`required_signatures` rule refuse a git push of unsigned commits, and the API says so."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from github import Auth, Github

from tests.doubles.github import GitHubDouble

REPO = "octo/signed"


def _push(double: GitHubDouble, tmp_path: Path, branch: str) -> subprocess.CompletedProcess[str]:
    env = double.git_env(double.issue_user_token("alice"))
    work = tmp_path / branch.replace("/", "-")

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args], cwd=work, env=env, capture_output=True, text=True, check=False
        )

    subprocess.run(["git", "clone", "-q", double.clone_url(REPO), str(work)], env=env, check=True)
    git("checkout", "-q", "-B", branch)
    (work / "new.txt").write_text("unsigned\n")
    git("add", "new.txt")
    git("commit", "-q", "-m", "Unsigned")
    return git("push", "origin", f"HEAD:refs/heads/{branch}")


def test_unsigned_pushes_are_refused_where_signatures_are_required(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    double.set_permission(REPO, "alice", "admin")
    double.protections.require_signatures(REPO, "classic")
    double.protections.add_ruleset(REPO, ["onloop/*"], ["required_signatures"])

    classic = _push(double, tmp_path, "classic")
    assert classic.returncode != 0
    assert "Commits must have verified signatures" in classic.stderr
    ruled = _push(double, tmp_path, "onloop/issue-1")
    assert ruled.returncode != 0 and "required_signatures" in ruled.stderr
    assert _push(double, tmp_path, "free").returncode == 0  # elsewhere: as before
    assert double.branch_sha(REPO, "classic") is None

    token = double.issue_user_token("alice")

    def get(path: str) -> tuple[int, object]:
        url = f"{double.api_url}/repos/{REPO}/{path}"
        request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    # Reading classic protection needs the App's `administration: read`, which onloop's
    # manifest does not ask for: GitHub answers 403, as the double does.
    status, body = get("branches/classic/protection/required_signatures")
    assert status == 403, body
    status, rules = get("rules/branches/onloop/issue-1")  # metadata: read is enough
    assert status == 200 and isinstance(rules, list)
    assert [r["type"] for r in rules] == ["required_signatures"]


def test_create_commit_on_branch_makes_a_verified_commit_as_the_user(
    github_double: GitHubDouble,
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n", "old.txt": "x\n"})
    double.set_permission(REPO, "alice", "write")
    double.protections.add_ruleset(REPO, ["~ALL"], ["required_signatures"])
    double.create_branch(REPO, "onloop/issue-1")
    head = double.branch_sha(REPO, "onloop/issue-1")
    client = Github(auth=Auth.Token(double.issue_user_token("alice")), base_url=double.api_url)
    mutation = (
        "mutation($input: CreateCommitOnBranchInput!) "
        "{ createCommitOnBranch(input: $input) { commit { oid } } }"
    )

    def create(expected: str | None) -> dict[str, object]:
        given = {
            "branch": {"repositoryNameWithOwner": REPO, "branchName": "onloop/issue-1"},
            "message": {"headline": "Fix it", "body": "Onloop-Job: 7"},
            "fileChanges": {
                "additions": [{"path": "a/new.txt", "contents": "bmV3Cg=="}],
                "deletions": [{"path": "old.txt"}],
            },
            "expectedHeadOid": expected,
        }
        _, data = client.requester.requestJsonAndCheck(
            "POST",
            client.requester.graphql_url,
            input={"query": mutation, "variables": {"input": given}},
        )
        return data

    made = create(head)
    sha = made["data"]["createCommitOnBranch"]["commit"]["oid"]  # type: ignore[index]
    assert double.branch_sha(REPO, "onloop/issue-1") == sha and sha in double.verified
    git_dir = double.git_dir(REPO)
    show = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", "-s", "--format=%an%n%P%n%B", sha],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert show[:2] == ["alice", head] and "Onloop-Job: 7" in show
    files = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", sha],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert files == ["README.md", "a/new.txt"]
    stale = create(head)  # the branch moved on: refused, never overwritten
    assert stale["errors"][0]["type"] == "STALE_DATA"  # type: ignore[index]
    assert double.branch_sha(REPO, "onloop/issue-1") == sha
