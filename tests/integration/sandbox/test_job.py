"""A whole job's sandbox: checkout from the cache, no credentials inside, warm snapshots,
and the job's commits brought out through a bundle and pushed with the token."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tasks.git.process import git
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.base import SandboxBackend, SandboxError
from tasks.sandbox.commits import (
    collect_commits,
    commit_all,
    read_workspace_file,
    run_then_bundle,
)
from tasks.sandbox.job import SetupFailed, job_sandbox
from tasks.sandbox.teardown import Teardown
from tests.doubles.git_server import GitServer, make_repo
from tests.doubles.sandboxes import new_job_id

PROJECT = {
    "pyproject.toml": "[project]\nname = 'demo'\nversion = '0.1'\n",
    "demo.py": "VALUE = 1\n",
}


def test_no_onloop_value_or_token_inside_the_sandbox(
    backend: SandboxBackend,
    run_image: str,
    git_server: GitServer,
    tmp_path: Path,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONLOOP_WEBHOOK_SECRET", "hook-secret-value")
    monkeypatch.setenv("ONLOOP_SECRET_KEY", "key-secret-value")
    sha = make_repo(git_server.root / "o" / "r.git", PROJECT)
    cache = RepoCache(tmp_path / "cache")
    with job_sandbox(
        backend,
        cache,
        job_id=new_job_id(),
        repo="o/r",
        clone_url=git_server.url("o/r"),
        rev=sha,
        image=run_image,
        workspace_root=tmp_path / "jobs",
        token=token,
        branch="onloop/issue-1",
    ) as job:
        assert any(ok for _, _, ok in git_server.requests)  # it did use the token...
        sb = job.sandbox
        shown = sb.exec("env && cat /proc/self/environ")
        assert shown.ok and "HOME=" in shown.stdout, shown
        env = shown.stdout
        for secret in ("ONLOOP_", token, "hook-secret-value", "key-secret-value"):
            assert secret not in env
        grep = sb.exec(["grep", "-rlsF", token, "/workspace", "/tmp"])
        assert grep.exit_code == 1 and grep.stdout == ""  # ...but it is nowhere inside
        shown = sb.exec("cat /workspace/.git/config")
        config = shown.stdout
        assert shown.ok, shown
        assert "url = " + git_server.url("o/r") in config
        assert token not in config and "x-access-token" not in config and "@" not in config
        assert sb.exec("git log --format=%H -1").stdout.strip() == sha  # git works inside
        for path in job.workspace.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert token.encode() not in path.read_bytes(), path
        workspace = job.workspace
    assert not workspace.exists()


def test_commits_come_out_through_a_bundle_and_are_pushed(
    backend: SandboxBackend, run_image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    sha = make_repo(git_server.root / "o" / "r.git", PROJECT)
    cache = RepoCache(tmp_path / "cache")
    url = git_server.url("o/r")
    kwargs: dict[str, Any] = {"repo": "o/r", "clone_url": url, "image": run_image, "token": token}
    with job_sandbox(
        backend, cache, job_id=new_job_id(), rev=sha, workspace_root=tmp_path / "j", **kwargs
    ) as job:
        sb = job.sandbox
        assert collect_commits(sb, cache, "o/r", sha, "refs/onloop/jobs/1") is None
        ident = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
        ident["GIT_COMMITTER_EMAIL"] = "a@b"
        made = sb.exec(
            "echo 'VALUE = 2' > demo.py && git commit -qam 'fix' -m 'Onloop-Job: 1'", env=ident
        )
        assert made.ok, made
        tip = collect_commits(sb, cache, "o/r", sha, "refs/onloop/jobs/1")
        assert tip and tip != sha
        cache.push("o/r", url, tip, "refs/heads/onloop/issue-1", token, lease="")

        # The job's own commit bundles its commits in the same command: one exec, not two.
        ran: list[list[str]] = []
        sb.observers.append(lambda argv, _result: ran.append(argv))
        sb.exec("echo 'VALUE = 3' > demo.py")
        assert commit_all(sb, ["-m", "again"], ident, bundle_since=tip)
        assert not commit_all(sb, ["-m", "nothing"], ident, bundle_since=tip)
        again = collect_commits(sb, cache, "o/r", tip, "refs/onloop/jobs/2", bundled=True)
        assert len(ran) == 3 and again and again != tip
        mirror = cache.mirror_path("o/r")
        assert git(["rev-parse", f"{again}~1"], mirror).stdout.strip() == tip
        assert git(["show", f"{again}:demo.py"], mirror).stdout == "VALUE = 3\n"
    served = git_server.root / "o" / "r.git"
    assert git(["rev-parse", "refs/heads/onloop/issue-1"], served).stdout.strip() == tip
    # A symlink planted by the sandbox is not followed by the worker.
    ws = tmp_path / "evil"
    ws.mkdir()
    (ws / ".onloop-out.bundle").symlink_to("/etc/hostname")
    with pytest.raises(OSError):
        read_workspace_file(ws, ".onloop-out.bundle", tmp_path / "out")


def test_a_rebase_and_its_bundle_are_one_command(
    backend: SandboxBackend, run_image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """`run_then_bundle`: the command, then its commits bundled, in one sandbox command; a
    failed command bundles nothing, and one that leaves no commit says so."""
    served = git_server.root / "o" / "r.git"
    base = make_repo(served, PROJECT)
    ident = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    ident["GIT_COMMITTER_EMAIL"] = "a@b"
    cache, url = RepoCache(tmp_path / "cache"), git_server.url("o/r")
    kwargs: dict[str, Any] = {"repo": "o/r", "clone_url": url, "image": run_image, "token": token}
    with job_sandbox(
        backend, cache, job_id=new_job_id(), rev=base, workspace_root=tmp_path / "j", **kwargs
    ) as job:
        sb = job.sandbox
        script = (
            "git checkout -qb topic && echo 'VALUE = 2' > demo.py && git commit -qam topic && "
            "git checkout -q - && echo x > other.py && git add other.py && git commit -qm main"
        )
        assert sb.exec(script, env=ident).ok
        main = collect_commits(sb, cache, "o/r", base, "refs/onloop/jobs/main")  # the new base
        assert main is not None
        ran: list[list[str]] = []
        sb.observers.append(lambda argv, _result: ran.append(argv))
        assert sb.exec(["git", "checkout", "-q", "topic"]).ok
        rebase = ["git", "rebase", "--quiet", main]
        done, bundled = run_then_bundle(sb, rebase, main, ident)
        assert done.ok and bundled, done
        tip = collect_commits(sb, cache, "o/r", main, "refs/onloop/jobs/3", bundled=True)
        assert len(ran) == 2 and tip  # the checkout, then one command for both
        mirror = cache.mirror_path("o/r")
        assert git(["rev-parse", f"{tip}~1"], mirror).stdout.strip() == main
        assert git(["show", f"{tip}:demo.py"], mirror).stdout == "VALUE = 2\n"

        # Nothing new since the base: no bundle, and the caller is told so.
        done, bundled = run_then_bundle(sb, ["git", "rebase", "--quiet", tip], tip, ident)
        assert done.ok and not bundled, done
        # A failed command (a rebase onto a commit that does not exist) bundles nothing.
        missing = "0" * 40
        done, bundled = run_then_bundle(sb, ["git", "rebase", missing], missing, ident)
        assert not done.ok and not bundled and done.exit_code not in (82, 83), done


@pytest.mark.docker
def test_warm_snapshot_skips_setup_for_the_same_dependencies(
    docker_client: Any, image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    from tasks.sandbox.docker_backend import DockerBackend
    from tasks.sandbox.snapshots import SNAPSHOT_LABEL, SnapshotStore

    # The store sees every snapshot on the daemon (one store per worker host), and eviction
    # below counts them: start from none, whatever an earlier (failed) test left behind.
    for leftover in docker_client.images.list(filters={"label": SNAPSHOT_LABEL}):
        docker_client.images.remove(leftover.id, force=True)
    bare = git_server.root / "o" / "snap.git"
    sha = make_repo(bare, PROJECT)
    cache = RepoCache(tmp_path / "cache")
    store = SnapshotStore(docker_client, tmp_path / "snapshots", max_bytes=10 * 2**30)
    backend = DockerBackend(docker_client)
    setup = "pip install --quiet --no-index --no-build-isolation -e . && echo done > /opt/venv/m"
    common: dict[str, Any] = {
        "repo": "o/snap",
        "clone_url": git_server.url("o/snap"),
        "image": image,
        "token": token,
        "setup": setup,
        "snapshots": store,
        "workspace_root": tmp_path / "jobs",
    }
    made: list[str] = []
    try:
        with job_sandbox(backend, cache, job_id=new_job_id(), rev=sha, **common) as first:
            assert first.setup is not None and first.setup.ok
            assert first.snapshot and first.image == first.snapshot
            made.append(first.snapshot)
            assert first.sandbox.exec("python -c 'import demo; print(demo.VALUE)'").stdout == "1\n"
            assert first.sandbox.exec("touch /opt/venv/x").exit_code != 0  # read-only again
        with job_sandbox(backend, cache, job_id=new_job_id(), rev=sha, **common) as second:
            assert second.setup is None and second.snapshot == first.snapshot
            assert second.sandbox.exec("cat /opt/venv/m").stdout == "done\n"
            assert second.sandbox.exec("python -c 'import demo'").ok
        # A different dependency file means a different key: setup runs again.
        other = dict(common, setup=setup + " && true")
        with job_sandbox(backend, cache, job_id=new_job_id(), rev=sha, **other) as third:
            assert third.setup is not None and third.snapshot != first.snapshot
            made.append(str(third.snapshot))
        # Above the cap, the least recently used snapshot goes first.
        os.utime(store.state_dir / f"{store.usage()[0][3]}.used", (1, 1))
        oldest = store.usage()[0][2]
        store.max_bytes = sum(r[1] for r in store.usage()) - 1
        assert store.evict() == [oldest]
        failing = dict(common, setup="exit 3")
        with pytest.raises(SetupFailed) as err:
            with job_sandbox(backend, cache, job_id=new_job_id(), rev=sha, **failing):
                pass
        assert err.value.result.exit_code == 3
    finally:
        for ref in made:
            try:
                docker_client.images.remove(ref)
            except Exception:
                pass


@pytest.mark.docker
def test_pool_primes_the_next_job_of_a_repository(
    docker_client: Any, image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    from tasks.sandbox.docker_backend import POOL_LABEL, DockerBackend
    from tasks.sandbox.pool import WarmPool
    from tasks.sandbox.reaper import process_token
    from tests.integration.sandbox.test_repo_cache import push_commit

    bare = git_server.root / "o" / "hot.git"
    first = make_repo(bare, {**PROJECT, "old.txt": "old\n"})
    backend = DockerBackend(docker_client)
    pool = WarmPool(backend, image, tmp_path / "pool", size=1, primed=1)
    cache = RepoCache(tmp_path / "cache")
    common: dict[str, Any] = {
        "repo": "o/hot",
        "clone_url": git_server.url("o/hot"),
        "image": image,
        "token": token,
        "workspace_root": tmp_path / "jobs",
        "pool": pool,
    }
    try:
        pool.fill()
        with job_sandbox(backend, cache, job_id=new_job_id(), rev=first, **common) as one:
            assert one.pooled and not one.primed
            assert one.sandbox.exec("cat old.txt").stdout == "old\n"
        pool.settle()
        push_commit(bare, "new.txt", "new\n")
        second = push_commit(bare, "pkg/sub/deep.py", "D = 1\n")  # directories it lacked
        with job_sandbox(
            backend, cache, job_id=new_job_id(), rev=second, branch="onloop/x", **common
        ) as two:
            assert two.pooled and two.primed and two.sha == second
            sb = two.sandbox
            assert sb.exec("cat new.txt old.txt").stdout == "new\nold\n"
            assert sb.exec("git rev-parse HEAD").stdout.strip() == second
            assert sb.exec("git status --porcelain").stdout == ""
            assert sb.exec("git rev-parse --abbrev-ref HEAD").stdout.strip() == "onloop/x"
            config = sb.exec("cat .git/config").stdout
            assert token not in config and "@" not in config
            if os.geteuid() == 0:  # handed to the sandbox's user, new directories too
                uid = two.sandbox.limits.uid
                stray = [  # hard links into the mirror stay root's, read-only
                    str(f)
                    for f in [two.workspace, *two.workspace.rglob("*")]
                    if (st := f.lstat()).st_uid != uid
                    and (stat.S_ISDIR(st.st_mode) or st.st_nlink == 1)
                ]
                assert stray == []
            ident = "-c user.name=a -c user.email=a@e"
            wrote = sb.exec(
                f"echo X = 2 > pkg/sub/more.py && echo changed > new.txt && git add -A && "
                f"git {ident} commit -qm more && git {ident} commit -q --amend -m again"
            )
            assert wrote.ok, wrote.output
    finally:
        pool.close()
    mine = {"label": f"{POOL_LABEL}={process_token()}"}
    assert not docker_client.containers.list(all=True, filters=mine)


def test_with_a_teardown_the_sandbox_goes_after_the_next_step(
    backend: SandboxBackend, run_image: str, git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """The job goes on (to push) while its sandbox waits: the removal and the pool's refill
    are held through the step after the sandbox's, then run on threads; once `finish` has
    joined them, neither the sandbox nor its workspace is left."""
    sha = make_repo(git_server.root / "o" / "r.git", PROJECT)
    teardown = Teardown()
    url, cache = git_server.url("o/r"), RepoCache(tmp_path / "cache")
    kwargs: dict[str, Any] = {"repo": "o/r", "clone_url": url, "image": run_image, "token": token}
    sandbox_step = teardown.begin()
    with job_sandbox(
        backend,
        cache,
        job_id=new_job_id(),
        rev=sha,
        workspace_root=tmp_path / "j",
        **kwargs,
        teardown=teardown,
    ) as job:
        assert job.sandbox.exec(["true"]).ok
        assert teardown.held == []
    teardown.release(sandbox_step)  # the sandbox's own step ends: still held
    assert teardown.held == ["sandbox-removal"]
    push_step = teardown.begin()
    assert job.sandbox.exec(["true"]).ok and job.workspace.exists()  # during the push
    teardown.release(push_step)
    assert teardown.held == []
    teardown.finish(60)
    assert job.sandbox.stopped and not job.workspace.exists()
    with pytest.raises(SandboxError):
        job.sandbox.exec(["true"])
