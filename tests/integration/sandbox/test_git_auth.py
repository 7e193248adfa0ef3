"""Git credentials reach one git process through askpass and are never written down."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tasks.git import process as git_auth
from tasks.git.process import GitError, git
from tests.doubles.git_server import GitServer, make_repo


class FakeToken:
    """Like app.github.clients.InstallationToken: the text only through .secret()."""

    def __init__(self, value: str) -> None:
        self._value = value

    def secret(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "FakeToken(***)"


def all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_clone_with_token_leaves_no_credentials(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    make_repo(git_server.root / "o" / "r.git", {"README.md": "hi\n"})
    dest = tmp_path / "clone"
    git(["clone", "--quiet", git_server.url("o/r"), str(dest)], token=FakeToken(token))
    assert (dest / "README.md").read_text() == "hi\n"
    assert any(ok for _, _, ok in git_server.requests)
    config = (dest / ".git" / "config").read_text()
    assert token not in config and "x-access-token" not in config and "@" not in config
    assert token.encode() not in all_bytes(dest)
    askpass = git_auth.askpass_script()
    assert token not in askpass.read_text()
    assert askpass.stat().st_mode & 0o077 == 0


def test_without_or_with_a_wrong_token_git_fails_and_says_nothing_secret(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    make_repo(git_server.root / "o" / "r.git", {"a": "1"})
    with pytest.raises(GitError):
        git(["clone", "--quiet", git_server.url("o/r"), str(tmp_path / "a")])
    wrong = token[:-4] + "zzzz"
    with pytest.raises(GitError) as err:
        git(["clone", "--quiet", git_server.url("o/r"), str(tmp_path / "b")], token=wrong)
    assert wrong not in str(err.value)
    assert not any(ok for _, _, ok in git_server.requests)


def test_urls_with_credentials_are_refused(tmp_path: Path, token: str) -> None:
    for url in (
        f"https://x-access-token:{token}@github.com/o/r.git",
        f"http://{token}@127.0.0.1/o/r.git",
    ):
        with pytest.raises(ValueError) as err:
            git(["clone", url, str(tmp_path / "x")])
        assert token not in str(err.value)
    assert git_auth.redact(f"see https://u:{token}@h/x and {token}", token).count("***") == 2


def test_repository_config_cannot_run_code_while_the_token_is_there(
    tmp_path: Path, token: str
) -> None:
    repo = tmp_path / "evil"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    proof = tmp_path / "ran"
    script = tmp_path / "steal.sh"
    script.write_text(f'#!/bin/sh\nenv > "{proof}"\n')
    script.chmod(0o755)
    hooks = repo / ".git" / "hooks"
    for hook in ("post-checkout", "pre-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\nexec {script}\n")
        (hooks / hook).chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", str(script)], check=True)
    (repo / "f").write_text("x")
    git(["add", "f"], repo, token=token)
    git(["commit", "-q", "-m", "m"], repo, token=token)
    git(["status"], repo, token=token)
    assert not proof.exists()


def test_git_environment_holds_nothing_of_the_worker(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    monkeypatch.setenv("ONLOOP_SECRET_KEY", "worker-secret")
    env = git_auth.git_env(token)
    assert "ONLOOP_SECRET_KEY" not in env
    assert env[git_auth.TOKEN_VAR] == token
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull
    assert git_auth.TOKEN_VAR not in git_auth.git_env(None)
    with pytest.raises(ValueError):
        git_auth.reveal("two\nlines")
