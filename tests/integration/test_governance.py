"""Policy before any work: one test per rule, the kill switch (and its CLI), token narrowing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from github import GithubException

from app.core.kinds import Kind
from app.github import clients as gh
from app.policy import governance
from app.policy.governance import Request, verdict
from app.policy.repo_config import RepoConfig, parse_repo_config
from app.store import audit
from app.store.db import Database
from app.store.models import Pause
from tasks.git.process import GitError, git
from tests.doubles.github import GitHubDouble
from tests.doubles.github.settings import settings_for

REPO = "octo/hello"


def config(text: str = "") -> RepoConfig:
    return parse_repo_config(text)[0]


def request(**changes: object) -> Request:
    values: dict[str, object] = {
        "kind": Kind.REBASE_PR,
        "repo": REPO,
        "requested_by": "alice",
        "role": "write",
    }
    values.update(changes)
    return Request(**values)  # type: ignore[arg-type]


def test_a_permitted_person_passes() -> None:
    assert verdict(request(), config()) == governance.ALLOWED


@pytest.mark.parametrize("scope", [governance.REPO, governance.INSTALLATION])
def test_kill_switch(scope: str) -> None:
    paused = Pause(scope=scope, target="x", reason="incident 42")
    result = verdict(request(), config(), paused)
    assert (result.allowed, result.rule) == (False, "kill_switch")
    assert "incident 42" in result.message


def test_bots_cannot_start_work() -> None:
    result = verdict(request(requested_by="dependabot[bot]", role="admin"), config())
    assert (result.allowed, result.rule) == (False, "bots")


def test_commands_the_repository_did_not_allow_are_refused() -> None:
    result = verdict(request(kind=Kind.REVIEW_PR), config("commands: [fix, rebase]"))
    assert (result.allowed, result.rule) == (False, "commands")
    assert verdict(request(kind=Kind.REBASE_PR), config("commands: [rebase]")).allowed
    # the fix label is governed by `fix` too
    fix_issue = request(kind=Kind.FIX_ISSUE)
    assert verdict(fix_issue, config("commands: [rebase]")).rule == "commands"


@pytest.mark.parametrize(
    ("role", "required", "allowed"),
    [
        ("read", "write", False),
        ("triage", "write", False),
        ("write", "write", True),
        ("maintain", "admin", False),
        ("admin", "admin", True),
        ("none", "read", False),
        ("read", "read", True),
    ],
)
def test_trigger_permission(role: str, required: str, allowed: bool) -> None:
    result = verdict(request(role=role), config(f"trigger_permission: {required}"))
    assert result.allowed is allowed
    if not allowed:
        assert result.rule == "trigger_permission"
        assert required in result.message and role in result.message


def automatic(**changes: object) -> Request:
    return request(kind=Kind.FIX_CI, requested_by="github-actions[bot]", automatic=True, **changes)


def test_automatic_fixes_follow_auto_fix_ci() -> None:
    assert verdict(automatic(), config()).allowed  # a bot may be behind an automatic run
    result = verdict(automatic(), config("auto_fix_ci: false"))
    assert (result.allowed, result.rule) == (False, "auto_fix_ci")


def test_automatic_fixes_stop_after_max_attempts() -> None:
    assert verdict(automatic(ci_fix_attempts=1), config("max_ci_fix_attempts: 2")).allowed
    result = verdict(automatic(ci_fix_attempts=2), config("max_ci_fix_attempts: 2"))
    assert (result.allowed, result.rule) == (False, "max_ci_fix_attempts")
    assert "/agent fix" in result.message


def test_forks_never_get_automatic_fixes() -> None:
    result = verdict(automatic(fork=True, maintainer_can_modify=True), config())
    assert (result.allowed, result.rule) == (False, "fork.automatic")


def test_fixing_a_fork_needs_edits_from_maintainers() -> None:
    fork = request(kind=Kind.FIX_CI, fork=True)
    result = verdict(fork, config())
    assert (result.allowed, result.rule) == (False, "fork.no_edits")
    assert verdict(request(kind=Kind.FIX_CI, fork=True, maintainer_can_modify=True), config())
    # a rebase of such a fork is allowed: it answers with a patch instead of pushing
    assert verdict(request(kind=Kind.REBASE_PR, fork=True), config()).allowed


def test_the_kill_switch_comes_first() -> None:
    paused = Pause(scope=governance.REPO, target=REPO)
    result = verdict(request(requested_by="x[bot]", role="none"), config(), paused)
    assert result.rule == "kill_switch"


def test_pause_and_resume(db: Database) -> None:
    assert governance.is_paused(db, REPO, 7) is None
    governance.pause(db, governance.REPO, "Octo/Hello", reason="flaky", by="ops")
    found = governance.is_paused(db, REPO, 7)
    assert found is not None and (found.scope, found.reason, found.paused_by) == (
        "repo",
        "flaky",
        "ops",
    )
    assert governance.is_paused(db, "octo/other", 7) is None
    governance.pause(db, governance.INSTALLATION, "7")
    assert governance.is_paused(db, "octo/other", 7) is not None
    assert governance.is_paused(db, "octo/other", 8) is None
    assert governance.resume(db, governance.REPO, REPO, by="ops") is True
    assert governance.resume(db, governance.REPO, REPO) is False
    assert governance.resume(db, governance.INSTALLATION, "7") is True
    assert governance.is_paused(db, REPO, 7) is None
    actions = [(e.action, e.detail["target"]) for e in audit.entries(db)]
    assert actions == [("pause", REPO), ("pause", "7"), ("resume", REPO), ("resume", "7")]
    with pytest.raises(ValueError):
        governance.pause(db, governance.REPO, "not-a-repo")


def test_check_reads_the_kill_switch_and_audits_the_verdict(db: Database) -> None:
    assert governance.check(db, request(), config(), installation_id=7, job_id=3).allowed
    governance.pause(db, governance.INSTALLATION, "7", reason="budget")
    refused = governance.check(db, request(), config(), installation_id=7, job_id=3)
    assert refused.rule == "kill_switch"
    verdicts = audit.entries(db, job_id=3, action=audit.POLICY)
    assert [(e.detail["allowed"], e.detail["rule"]) for e in verdicts] == [
        (True, "ok"),
        (False, "kill_switch"),
    ]
    assert verdicts[0].actor == "alice" and verdicts[0].repo == REPO


def onloop(args: list[str], tmp_path: Path, database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLOOP_")}
    env |= {
        "ONLOOP_DATABASE_URL": database_url,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_pause_resume_and_audit_commands(db: Database, database_url: str, tmp_path: Path) -> None:
    done = onloop(["pause", REPO, "--reason", "incident", "--by", "ops"], tmp_path, database_url)
    assert done.returncode == 0, done.stderr
    assert governance.is_paused(db, REPO, None) is not None
    listed = onloop(["pause"], tmp_path, database_url)
    assert "repo octo/hello  by ops  incident" in listed.stdout
    assert onloop(["pause", "--installation", "9"], tmp_path, database_url).returncode == 0
    assert governance.is_paused(db, "a/b", 9) is not None
    assert onloop(["pause", "nope"], tmp_path, database_url).returncode == 2
    resumed = onloop(["resume", REPO], tmp_path, database_url)
    assert resumed.returncode == 0 and "resumed repo octo/hello" in resumed.stdout
    assert governance.is_paused(db, REPO, None) is None
    again = onloop(["resume", REPO], tmp_path, database_url)
    assert "was not paused" in again.stdout

    audit.record(db, audit.STEP, repo=REPO, job_id=5, detail={"name": "push"})
    shown = onloop(["audit", "--repo", REPO, "--since", "1h", "--json"], tmp_path, database_url)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["action"] for r in rows] == ["pause", "resume", "step"]
    job = onloop(["audit", "--job", "5"], tmp_path, database_url)
    (line,) = job.stdout.splitlines()
    assert "job 5" in line and "step" in line and '"name":"push"' in line


@pytest.mark.parametrize("kind", list(Kind))
def test_installation_tokens_are_narrowed_to_the_repo_and_the_kind(
    github_double: GitHubDouble, tmp_path: Path, kind: str
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    double.create_repo("octo/other", files={"README.md": "other\n"})
    github = gh.GitHubApp.for_settings(settings_for(double, tmp_path))
    installation = next(i.id for i in double.installations.values() if i.account == "octo")
    token = github.installation_token(
        installation, repositories=[REPO], permissions=governance.token_permissions(kind)
    )
    assert dict(token.permissions) == governance.token_permissions(kind)
    assert "contents" not in token.permissions or token.permissions["contents"] == "read"
    client = github.installation_client(token)
    repo = client.get_repo(REPO)
    repo.get_issue(double.create_issue(REPO, "x").number).create_comment("onloop here")
    with pytest.raises(GithubException):
        client.get_repo("octo/other")
    work = tmp_path / "clone"
    git(["clone", "--quiet", double.clone_url(REPO), str(work)], token=token)
    (work / "new.txt").write_text("x\n")
    git(["add", "new.txt"], work)
    git(["commit", "--quiet", "-m", "x"], work)
    with pytest.raises(GitError):  # no installation token of a job can push code
        git(["push", "--quiet", "origin", "HEAD:refs/heads/sneaky"], work, token=token)
    assert double.branch_sha(REPO, "sneaky") is None
