"""The repository cache: one mirror per repository, fetched rarely, locked, cloned locally."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from tasks.git.mirror_upkeep import GC_AUTO_PACK_LIMIT, KEEP_JOB_REFS, needs_gc
from tasks.git.process import git
from tasks.git.repo_cache import RepoCache, RepoCacheError
from tests.doubles.git_server import GitServer, make_repo

IDENT = {"GIT_AUTHOR_NAME": "o", "GIT_AUTHOR_EMAIL": "o@e"}
IDENT |= {"GIT_COMMITTER_NAME": "o", "GIT_COMMITTER_EMAIL": "o@e"}


def fetches(server: GitServer) -> int:
    return sum(1 for method, path, ok in server.requests if ok and path.endswith("/info/refs"))


def push_commit(bare: Path, name: str, text: str) -> str:
    work = bare.with_name("tmp-work")
    subprocess.run(["git", "clone", "-q", str(bare), str(work)], check=True)
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text(text)
    ident = ["-c", "user.name=T", "-c", "user.email=t@e"]
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", *ident, "-C", str(work), "commit", "-qm", name], check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", "origin", "main"], check=True)
    sha = subprocess.run(
        ["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(["rm", "-rf", str(work)], check=True)
    return sha


def test_mirror_is_fetched_only_when_the_commit_is_missing(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    bare = git_server.root / "o" / "r.git"
    first = make_repo(bare, {"a.txt": "1\n"})
    cache = RepoCache(tmp_path / "cache")
    url = git_server.url("o/r")
    mirror = cache.ensure("o/r", url, token, sha=first)
    assert (mirror / "HEAD").exists() and fetches(git_server) == 1
    cache.ensure("o/r", url, token, sha=first)
    assert fetches(git_server) == 1  # warm: nothing fetched
    second = push_commit(bare, "b.txt", "2\n")
    cache.ensure("o/r", url, token, sha=second)
    assert fetches(git_server) == 2 and cache.has("o/r", second)
    assert token not in (mirror / "config").read_text()
    with pytest.raises(RepoCacheError):
        cache.ensure("o/r", url, token, sha="0" * 40)


def test_a_held_head_with_a_moved_base_is_fetched(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """A rebase's head may be in the mirror while its base's new tip is not: `also` fetches."""
    bare = git_server.root / "o" / "r.git"
    head = make_repo(bare, {"a.txt": "1\n"})
    cache, url = RepoCache(tmp_path / "cache"), git_server.url("o/r")
    cache.ensure("o/r", url, token, sha=head)
    base = push_commit(bare, "b.txt", "2\n")
    assert cache.commit("o/r", head, url, token) == head and fetches(git_server) == 1
    assert cache.commit("o/r", head, url, token, also=[base]) == head
    assert fetches(git_server) == 2 and cache.holds("o/r", [head, base])
    cache.ensure("o/r", url, token, sha=head, also=[base])
    assert fetches(git_server) == 2  # both held: nothing fetched
    with pytest.raises(RepoCacheError, match="0000000"):
        cache.ensure("o/r", url, token, sha=head, also=["0" * 40])


def test_checkout_is_local_complete_and_without_credentials(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    sha = make_repo(git_server.root / "o" / "r.git", {"src/m.py": "x = 1\n"})
    cache = RepoCache(tmp_path / "cache")
    cache.ensure("o/r", git_server.url("o/r"), token, sha=sha)
    before = len(git_server.requests)
    ws = tmp_path / "ws"
    got = cache.checkout("o/r", sha, ws, branch="onloop/issue-1", origin_url=git_server.url("o/r"))
    assert got == sha and len(git_server.requests) == before  # nothing from the server
    assert (ws / "src" / "m.py").read_text() == "x = 1\n"
    assert not (ws / ".git" / "objects" / "info" / "alternates").exists()
    config = (ws / ".git" / "config").read_text()
    assert token not in config and "@" not in config and str(cache.root) not in config
    head = git(["rev-parse", "--abbrev-ref", "HEAD"], ws).stdout.strip()
    assert head == "onloop/issue-1"
    packs = list((ws / ".git" / "objects" / "pack").glob("*.pack"))
    if os.geteuid() == 0 and packs:
        assert all(p.stat().st_nlink > 1 for p in packs)  # shared with the mirror
    copy = tmp_path / "ws2"
    cache.checkout("o/r", sha, copy, hardlink=False)
    assert all(
        p.stat().st_nlink == 1 for p in (copy / ".git" / "objects").rglob("*") if p.is_file()
    )
    with pytest.raises(RepoCacheError):
        cache.checkout("o/r", sha, ws)  # not empty


def _ensure_many(root: str, url: str, token: str, n: int) -> None:
    cache = RepoCache(Path(root))
    for _ in range(n):
        cache.ensure("o/r", url, token)


def test_concurrent_jobs_do_not_corrupt_the_mirror(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    bare = git_server.root / "o" / "r.git"
    make_repo(bare, {"a": "0"})
    for i in range(3):
        push_commit(bare, f"f{i}", str(i))
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(
            target=_ensure_many, args=(str(tmp_path / "c"), git_server.url("o/r"), token, 3)
        )
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    mirror = RepoCache(tmp_path / "c").mirror_path("o/r")
    git(["fsck", "--strict", "--no-progress"], mirror)


def test_the_lock_excludes_and_times_out(tmp_path: Path) -> None:
    holder = RepoCache(tmp_path / "c")
    waiter = RepoCache(tmp_path / "c", lock_timeout=0.3)
    with holder.lock("o/r"):
        with pytest.raises(RepoCacheError):
            with waiter.lock("o/r"):
                pass
        with waiter.lock("o/other"):
            pass  # other repositories are not held up
    with waiter.lock("o/r"):
        pass


def test_dependency_files_are_read_from_the_mirror(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    files = {
        "pyproject.toml": "[project]\nname='x'\n",
        "requirements-dev.txt": "pytest\n",
        "requirements/base.txt": "click\n",
        "src/x.py": "",
    }
    sha = make_repo(git_server.root / "o" / "r.git", files)
    cache = RepoCache(tmp_path / "cache")
    cache.ensure("o/r", git_server.url("o/r"), token, sha=sha)
    from tasks.sandbox.snapshots import DEPENDENCY_FILES

    found = cache.dependency_blobs("o/r", sha, DEPENDENCY_FILES)
    assert [p for p, _ in found] == [
        "pyproject.toml",
        "requirements-dev.txt",
        "requirements/base.txt",
    ]
    assert all(len(blob) == 40 for _, blob in found)


def test_a_primed_workspace_moved_to_a_new_head_has_the_moved_base_too(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """A warm pool's workspace was checked out before the base moved: refreshed for a job, it
    must hold the base's new commits as a fresh checkout would (a rebase onto them)."""
    bare = git_server.root / "o" / "r.git"
    first = make_repo(bare, {"a.txt": "1\n"})
    cache = RepoCache(tmp_path / "cache")
    url = git_server.url("o/r")
    cache.ensure("o/r", url, token, sha=first)
    primed = tmp_path / "primed"
    cache.checkout("o/r", first, primed)
    moved = push_commit(bare, "b.txt", "2\n")  # main moves on after the workspace was primed
    cache.ensure("o/r", url, token, sha=moved)
    assert cache.refresh("o/r", first, primed) == first
    found = git(["cat-file", "-e", f"{moved}^{{commit}}"], primed, check=False)
    assert found.returncode == 0, "the refreshed workspace lacks the moved base"
    tip = git(["rev-parse", "refs/remotes/origin/main"], primed).stdout.strip()
    assert tip == moved


def test_a_primed_workspace_gets_a_base_only_an_onloop_ref_reaches(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """A base whose tip is onloop's own commit (its branch pushed to main by hand) is in the
    mirror under refs/onloop/ only, not under its branches: `also` still brings it over."""
    bare = git_server.root / "o" / "r.git"
    first = make_repo(bare, {"a.txt": "1\n"})
    cache = RepoCache(tmp_path / "cache")
    mirror = cache.ensure("o/r", git_server.url("o/r"), token, sha=first)
    primed = tmp_path / "primed"
    cache.checkout("o/r", first, primed)
    tree = git(["rev-parse", f"{first}^{{tree}}"], mirror).stdout.strip()
    made = ["commit-tree", tree, "-p", first, "-m", "onloop's"]
    ours = git(made, mirror, env=IDENT).stdout.strip()
    git(["update-ref", "refs/onloop/job-1", ours], mirror)
    assert cache.refresh("o/r", first, primed, also=[ours]) == first
    assert git(["cat-file", "-e", f"{ours}^{{commit}}"], primed, check=False).returncode == 0


def test_commit_fetches_only_for_a_sha_the_mirror_lacks_or_a_name(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """`commit`: a full sha the mirror holds is answered by the mirror alone; a sha it lacks,
    or a branch's name (which may have moved), brings the mirror up to date first."""
    bare = git_server.root / "o" / "r.git"
    first = make_repo(bare, {"a.txt": "1\n"})
    cache, url = RepoCache(tmp_path / "cache"), git_server.url("o/r")
    assert cache.commit("o/r", first, url, token) == first and fetches(git_server) == 1
    assert cache.commit("o/r", first, url, token) == first and fetches(git_server) == 1
    second = push_commit(bare, "b.txt", "2\n")
    assert cache.commit("o/r", "main", url, token) == second and fetches(git_server) == 2
    third = push_commit(bare, "c.txt", "3\n")
    assert cache.commit("o/r", third, url, token) == third and fetches(git_server) == 3
    primed = tmp_path / "primed"
    cache.checkout("o/r", first, primed)
    assert cache.refresh("o/r", third, primed) == third  # a sha it lacked: fetched, checked out
    assert (primed / "c.txt").read_text() == "3\n"
    assert cache.refresh("o/r", third, primed) == third  # and one it has


def test_needs_gc_agrees_with_git_gc_auto(tmp_path: Path) -> None:
    """The mirror's gc starts only when `git gc --auto` would act: a few loose objects leave
    both alone; 9,000 make both act, and after git's gc there is nothing left to do."""
    repo, files = tmp_path / "r.git", tmp_path / "files"
    git(["init", "-q", "--bare", str(repo)])
    files.mkdir()

    def write_loose(count: int) -> None:  # blobs a branch reaches, so gc packs them
        paths = []
        for n in range(count):
            (files / str(n)).write_text(f"blob {n} {count}\n")
            paths.append(str(files / str(n)))
        made = git(["hash-object", "-w", "--stdin-paths"], repo, input="\n".join(paths) + "\n")
        listing = "".join(f"100644 blob {b}\t{n}\n" for n, b in enumerate(made.stdout.split()))
        tree = git(["mktree"], repo, input=listing).stdout.strip()
        commit = git(["commit-tree", tree, "-m", str(count)], repo, env=IDENT).stdout.strip()
        git(["update-ref", f"refs/heads/b{count}", commit], repo)

    write_loose(50)
    assert not needs_gc(repo)
    write_loose(9000)
    assert needs_gc(repo)
    git(["gc", "--auto", "--quiet"], repo)
    assert not needs_gc(repo)


def test_needs_gc_counts_packs_as_git_does(tmp_path: Path) -> None:
    """50 packs are git's limit: at 50 neither acts, at 51 both do; a kept pack counts for
    neither."""
    repo = tmp_path / "r.git"
    git(["init", "-q", "--bare", str(repo)])

    def packs() -> list[Path]:
        return sorted((repo / "objects" / "pack").glob("*.idx"))

    for n in range(51):
        blob = git(["hash-object", "-w", "--stdin"], repo, input=f"pack {n}\n").stdout
        git(["pack-objects", "-q", str(repo / "objects" / "pack" / "pack")], repo, input=blob)
        if n == 49:
            assert len(packs()) == 50 and not needs_gc(repo)
    assert len(packs()) == 51 and needs_gc(repo)
    packs()[0].with_suffix(".keep").touch()
    assert not needs_gc(repo)
    git(["gc", "--auto", "--quiet"], repo)
    assert len(packs()) == 51  # git agrees: with one kept, 50 packs are not too many
    packs()[0].with_suffix(".keep").unlink()
    git(["gc", "--auto", "--quiet"], repo)
    assert len(packs()) < 51 and not needs_gc(repo)


def test_a_gc_lets_the_old_job_refs_go_and_keeps_the_newest(
    git_server: GitServer, tmp_path: Path, token: str
) -> None:
    """Each job leaves refs/onloop/job-<id> in the mirror: when the mirror needs a gc, the
    refs of all but the newest KEEP_JOB_REFS jobs go first; other onloop refs stay."""
    bare = git_server.root / "o" / "r.git"
    first = make_repo(bare, {"a.txt": "1\n"})
    cache, url = RepoCache(tmp_path / "cache"), git_server.url("o/r")
    mirror = cache.ensure("o/r", url, token, sha=first)
    ids = [*range(1, KEEP_JOB_REFS + 6)]
    lines = [f"create refs/onloop/job-{n} {first}\n" for n in ids]
    lines += [f"create refs/onloop/job-{n}-suggestions {first}\n" for n in (1, ids[-1])]
    lines.append(f"create refs/onloop/backup/main/1 {first}\n")
    git(["update-ref", "--stdin"], mirror, input="".join(lines))

    def refs() -> set[str]:
        return set(
            git(["for-each-ref", "--format=%(refname)", "refs/onloop/"], mirror).stdout.split()
        )

    for n in range(GC_AUTO_PACK_LIMIT + 1):  # packs past git's limit: a gc is due
        blob = git(["hash-object", "-w", "--stdin"], mirror, input=f"pack {n}\n").stdout
        git(["pack-objects", "-q", str(mirror / "objects" / "pack" / "pack")], mirror, input=blob)
    before = refs()
    push_commit(bare, "b.txt", "2\n")
    cache.ensure("o/r", url, token)  # fetches, then the gc
    gone = before - refs()
    assert gone == {f"refs/onloop/job-{n}" for n in range(1, 6)} | {"refs/onloop/job-1-suggestions"}
    assert f"refs/onloop/job-{ids[-1]}-suggestions" in refs()
    assert "refs/onloop/backup/main/1" in refs()
    assert len([r for r in refs() if r.startswith("refs/onloop/job-")]) == KEEP_JOB_REFS + 1
