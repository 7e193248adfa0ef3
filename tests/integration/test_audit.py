"""The audit log: append-only, never a token, and a job's every GitHub write accounted for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from app.github import audit as github_audit
from app.github import clients as gh
from app.policy import governance
from app.store import audit
from app.store.db import Database
from tasks.git.process import git
from tests.doubles.github import GitHubDouble
from tests.doubles.github.settings import settings_for

REPO = "octo/hello"


def test_entries_are_filtered_by_repo_job_time_and_action(db: Database) -> None:
    audit.record(db, audit.DELIVERY, repo=REPO, delivery_guid="g-1", actor="alice")
    audit.record(db, audit.STEP, repo=REPO, job_id=1, detail={"name": "rebase"})
    audit.record(db, audit.STEP, repo="octo/other", job_id=2, detail={"name": "push"})
    assert [e.action for e in audit.entries(db, repo=REPO)] == ["delivery", "step"]
    assert [e.repo for e in audit.entries(db, job_id=2)] == ["octo/other"]
    assert len(audit.entries(db, action=audit.STEP)) == 2
    future = datetime.now(UTC) + timedelta(minutes=1)
    assert audit.entries(db, since=future) == []
    line = audit.format_entry(audit.entries(db, job_id=1)[0])
    assert REPO in line and "job 1" in line and '{"name":"rebase"}' in line


def test_tokens_are_never_stored(db: Database) -> None:
    secrets = [
        "ghs_" + "a" * 36,
        "ghu_" + "B" * 36,
        "ghp_" + "c1" * 18,
        "gho_" + "d" * 36,
        "ghr_" + "e" * 36,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxIn0.c2lnbmF0dXJl",
    ]
    audit.record(
        db,
        audit.SANDBOX_EXEC,
        repo=REPO,
        actor=f"alice {secrets[0]}",
        identity=secrets[1],
        detail={
            "argv": ["git", "push", f"https://x-access-token:{secrets[2]}@github.com/o/r"],
            "note": f"got {secrets[3]} and {secrets[4]}",
            "nested": {"deeper": [secrets[5], {"jwt": secrets[6]}]},
            "token": "opaque-value-without-a-prefix",
            "client_secret": "s3cr3t",
            "token_kind": "user",
        },
    )
    with db.engine.connect() as conn:
        stored = " ".join(str(v) for v in conn.execute(text("SELECT * FROM audit_log")).one())
    for secret in [*secrets, "opaque-value-without-a-prefix", "s3cr3t"]:
        assert secret not in stored
    (entry,) = audit.entries(db)
    assert entry.detail["token"] == audit.REDACTED and entry.detail["token_kind"] == "user"
    assert entry.detail["argv"][:2] == ["git", "push"]


def test_the_log_is_append_only(db: Database) -> None:
    audit.record(db, audit.STEP, repo=REPO, detail={"name": "x"})
    for statement in ("UPDATE audit_log SET action = 'other'", "DELETE FROM audit_log"):
        with pytest.raises(Exception, match="append-only"), db.engine.begin() as conn:
            conn.execute(text(statement))
    assert [e.action for e in audit.entries(db)] == ["step"]


def _installation(double: GitHubDouble) -> int:
    return next(i.id for i in double.installations.values() if i.account == "octo")


def _job_like_sequence(
    github: gh.GitHubApp, db: Database, double: GitHubDouble, tmp_path: Path
) -> str:
    """What a job does on GitHub: mint a narrowed token, comment as the bot and edit it,
    answer as the person (through a secondary rate limit), and push with their token."""
    token = github.installation_token(
        _installation(double),
        repositories=[REPO],
        permissions=governance.token_permissions("rebase_pr"),
    )
    repo = github.installation_client(token).get_repo(REPO)
    issue = repo.get_issue(double.create_issue(REPO, "Bug").number)
    status = issue.create_comment("onloop is on it")
    status.edit("onloop is on it: step 2")
    user = gh.UserToken(
        double.issue_user_token("alice"), datetime.now(UTC) + timedelta(hours=1), login="alice"
    )
    double.secondary_rate_limit(1, retry_after=1, method="POST", path_prefix=f"/repos/{REPO}")
    as_alice = github.user_client(user).get_repo(REPO).get_issue(issue.number)
    as_alice.create_comment("done, please review")
    work = tmp_path / "clone"
    git(["clone", "--quiet", double.clone_url(REPO), str(work)], token=user)
    (work / "fix.txt").write_text("fixed\n")
    git(["add", "fix.txt"], work)
    git(["commit", "--quiet", "-m", "Fix"], work)
    new = git(["rev-parse", "HEAD"], work).stdout.strip()
    git(["push", "--quiet", "origin", "HEAD:refs/heads/onloop/issue-1"], work, token=user)
    audit.record_push(
        db,
        repo=REPO,
        job_id=42,
        ref="refs/heads/onloop/issue-1",
        old=None,
        new=new,
        identity="alice",
    )
    return token.secret() + " " + user.secret()


def test_every_github_write_of_a_job_is_in_the_audit_log(
    github_double: GitHubDouble, db: Database, database_url: str, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo(REPO, files={"README.md": "hi\n"})
    double.set_permission(REPO, "alice", "write")
    github = gh.GitHubApp.for_settings(settings_for(double, tmp_path, database_url=database_url))
    with github_audit.audit_writes(db, repo=REPO, job_id=42):
        secrets = _job_like_sequence(github, db, double, tmp_path)
    github.installation_client(github.installation_token(_installation(double)))

    writes = [c for c in double.calls(surface="api") if c.method not in ("GET", "HEAD")]
    answered = [c for c in writes if not c.fault]
    assert [c.status for c in writes if c.fault] == [403]  # the secondary rate limit, waited out
    logged = audit.entries(db, job_id=42, action=audit.GITHUB_WRITE)
    # The token minted after the block is not the job's: everything before it is.
    assert len(answered) == len(logged) + 1
    for call, entry in zip(answered, logged, strict=False):
        assert (entry.detail["method"], entry.detail["path"]) == (call.method, call.path)
        assert entry.detail["status"] == call.status < 400
        assert entry.token_kind == call.identity.kind
        if call.identity.kind != "app":
            assert entry.identity == call.identity.login
    kinds = [(e.token_kind, e.detail["method"]) for e in logged]
    assert kinds == [
        ("app", "POST"),
        ("installation", "POST"),
        ("installation", "PATCH"),
        ("user", "POST"),
    ]
    (push,) = double.pushes
    (pushed,) = audit.entries(db, job_id=42, action=audit.GIT_PUSH)
    (update,) = push.updates
    assert (pushed.detail["ref"], pushed.detail["old"], pushed.detail["new"]) == (
        update.ref,
        update.old,
        update.new,
    )
    assert pushed.identity == push.identity.login == "alice"
    with db.engine.connect() as conn:
        rows = " ".join(str(r) for r in conn.execute(text("SELECT * FROM audit_log")).all())
    for secret in secrets.split():
        assert secret not in rows
