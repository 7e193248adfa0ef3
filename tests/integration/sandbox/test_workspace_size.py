"""Workspaces of larger trees: parallel checkout gives a full clone's tree, handing it to the
sandbox's user does not make git re-read it, the mirror stays out of the sandbox's reach, and
a job's workspace leaves at once and is removed in the background."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tasks.git.process import git
from tasks.git.repo_cache import RepoCache
from tasks.sandbox.disk import chown_tree
from tasks.sandbox.job import remove_later
from tasks.sandbox.reaper import job_from_workspace
from tests.doubles.git_server import GitServer, make_repo

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown and become nobody")


def files(n: int) -> dict[str, str | bytes]:
    """More files than git's threshold for parallel checkout (100), in nested directories,
    with binary blobs and an executable-looking name among them."""
    tree: dict[str, str | bytes] = {
        f"src/d{i % 7}/e{i % 5}/f{i}.txt": f"line {i}\n" * (i % 13 + 1) for i in range(n)
    }
    tree.update({f"assets/b{i}.bin": bytes(range(256)) * (64 + i) for i in range(5)})
    return tree


def cached(git_server: GitServer, tmp_path: Path, token: str) -> tuple[RepoCache, str]:
    sha = make_repo(git_server.root / "o" / "r.git", files(400))
    cache = RepoCache(tmp_path / "cache")
    cache.ensure("o/r", git_server.url("o/r"), token, sha=sha)
    return cache, sha


def tree_of(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def test_a_large_tree_checks_out_as_a_full_clone_does(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    cache, sha = cached(git_server, tmp_path, token)
    ws = tmp_path / "ws"
    cache.checkout("o/r", sha, ws, branch="b")
    plain = tmp_path / "plain"
    subprocess.run(
        ["git", "clone", "-q", "-b", "main", str(cache.mirror_path("o/r")), str(plain)], check=True
    )
    assert tree_of(ws) == tree_of(plain) and len(tree_of(ws)) == 405
    assert git(["ls-files", "-s"], ws).stdout == git(["ls-files", "-s"], plain).stdout
    assert git(["status", "--porcelain"], ws).stdout == ""


@needs_root
def test_handing_the_workspace_over_leaves_its_index_fresh(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """After the chown to the sandbox's user git must not see every file as changed (it would
    re-read the whole tree in the job's first git command)."""
    cache, sha = cached(git_server, tmp_path, token)
    ws = tmp_path / "ws"
    cache.checkout("o/r", sha, ws)
    chown_tree(ws, NOBODY, NOBODY)
    trust = {"safe.directory": str(ws)}
    assert git(["diff-files", "--name-only"], ws, config=trust).stdout == ""
    (ws / "src" / "d0" / "e0" / "f0.txt").write_text("changed\n")  # a change is still seen
    listed = git(["diff-files", "--name-only"], ws, config=trust).stdout.split()
    assert listed == ["src/d0/e0/f0.txt"]


@needs_root
def test_the_sandbox_user_cannot_write_the_mirror_through_its_workspace(
    git_server: GitServer, token: str
) -> None:
    base = Path(tempfile.mkdtemp(prefix="onloop-size-"))  # /tmp: reachable by any uid
    try:
        os.chmod(base, 0o755)
        cache, sha = cached(git_server, base, token)
        mirror = cache.mirror_path("o/r")
        git(["update-ref", "refs/onloop/other-job", sha], mirror)  # another job's result
        ws = base / "ws"
        cache.checkout("o/r", sha, ws)
        chown_tree(ws, NOBODY, NOBODY)
        assert not (ws / ".git" / "objects" / "info" / "alternates").exists()
        assert "onloop" not in git(["for-each-ref"], ws, config={"safe.directory": "*"}).stdout
        packs = list((ws / ".git" / "objects" / "pack").glob("*.pack"))
        assert packs and all(p.stat().st_uid == 0 for p in packs)  # shared, still root's
        for pack in packs:
            done = subprocess.run(
                ["python3", "-c", f"open({str(pack)!r}, 'r+b').write(b'x')"],
                user=NOBODY,
                group=NOBODY,
                capture_output=True,
                check=False,
            )
            assert done.returncode != 0 and b"PermissionError" in done.stderr
        # The sandbox may repack its own copy: the mirror's files stay as they were.
        env = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"}
        subprocess.run(["git", "-C", str(ws), "repack", "-adq"], user=NOBODY, env=env, check=True)
        assert git(["fsck", "--no-progress"], mirror).returncode == 0
        assert all(p.stat().st_uid == 0 for p in (mirror / "objects").rglob("*") if p.is_file())
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_second_workspace_shares_the_mirrors_objects(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a worker that is not root copies the objects (no hard links)")
    cache, sha = cached(git_server, tmp_path, token)
    mirror_packs = {p.stat().st_ino for p in cache.mirror_path("o/r").rglob("*.pack")}
    for name in ("ws1", "ws2"):
        cache.checkout("o/r", sha, tmp_path / name)
        packs = {p.stat().st_ino for p in (tmp_path / name).rglob("*.pack")}
        assert packs and packs <= mirror_packs


def test_a_finished_workspace_leaves_at_once_and_is_removed_later(tmp_path: Path) -> None:
    ws = tmp_path / "job-7-abc123"
    (ws / "deep" / "er").mkdir(parents=True)
    (ws / "deep" / "er" / "file").write_text("x")
    (ws / "deep" / "er").chmod(0o500)  # the sandbox made it read-only
    remove_later(ws)
    assert not ws.exists()
    leftovers = list(tmp_path.iterdir())
    # If the worker died now, the reaper would know whose it is.
    assert all(job_from_workspace(p.name) == "7" for p in leftovers)
    deadline = time.monotonic() + 30
    while list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.iterdir()) == []
