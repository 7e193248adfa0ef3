"""The GitHub double's "Require signed commits": classic protection and a ruleset's
`required_signatures` rule refuse a git push of unsigned commits, and the API says so."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

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
