"""The worker's repository cache: one bare mirror per repository; job workspaces come from it."""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tasks.git.mirror_upkeep import drop_old_job_refs, needs_gc
from tasks.git.process import TokenLike, git

HEADS = ("+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
# Parallel checkout (git >= 2.32; older git ignores it): writing a large tree is bound by
# the disk more than by a core, so more workers than cores still help.
PARALLEL = {"checkout.workers": "8"}
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# A fetch starts `git maintenance run --auto` when it ends, a process on every job's path:
# the mirror's gc is started by `ensure` when needs_gc says so, and a workspace needs none.
FETCH = ("fetch", "--quiet", "--no-auto-maintenance")


class RepoCacheError(RuntimeError):
    """The cache could not provide what was asked."""


def slug(repo: str) -> str:
    """A file name for `owner/name` that cannot escape the cache and cannot collide."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", repo.lower()).strip(".")[:100]
    return f"{safe}-{hashlib.sha256(repo.encode()).hexdigest()[:10]}"


class RepoCache:
    """Bare mirrors under `root`, updated with fetch under a per-mirror lock.

    The lock is `fcntl.flock` on a file per mirror (exclusive to change the mirror, shared
    to read from it), so it holds between the processes of one host. Each host keeps a cache
    of its own: flock does not hold across hosts, so the directory is never shared.
    """

    def __init__(self, root: Path, *, lock_timeout: float = 900.0) -> None:
        self.root = root
        self.lock_timeout = lock_timeout
        for sub in ("mirrors", "locks"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def mirror_path(self, repo: str) -> Path:
        """Where `owner/name`'s bare mirror lives."""
        return self.root / "mirrors" / f"{slug(repo)}.git"

    @contextlib.contextmanager
    def lock(self, repo: str, *, shared: bool = False) -> Iterator[bool]:
        """Hold the mirror's lock; waits at most `lock_timeout` seconds. Yields whether
        someone else may have changed the mirror since the caller last looked (it waited)."""
        path = self.root / "locks" / f"{slug(repo)}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            deadline, waited = time.monotonic() + self.lock_timeout, False
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RepoCacheError(f"timed out waiting for the lock on {repo}") from None
                    waited = True
                    time.sleep(0.05)
            yield waited
        finally:
            os.close(fd)  # closing releases the flock

    def has(self, repo: str, rev: str) -> bool:
        """Whether the mirror already holds commit `rev`."""
        mirror = self.mirror_path(repo)
        if not mirror.exists():
            return False
        done = git(["cat-file", "-e", f"{rev}^{{commit}}"], mirror, check=False, timeout=60)
        return done.returncode == 0

    def holds(self, repo: str, shas: Sequence[str]) -> bool:
        """Whether the mirror holds every commit in `shas` (full shas), in one git process."""
        return self._commits(repo, shas) is not None

    def _commits(self, repo: str, shas: Sequence[str]) -> list[str] | None:
        """The commits `shas` name (a tag's peeled), or None unless the mirror holds them all."""
        mirror = self.mirror_path(repo)
        if not shas or not all(_SHA.match(s) for s in shas) or not (mirror / "HEAD").exists():
            return None
        asked = "".join(f"{s}^{{commit}}\n" for s in shas)
        found = git(["cat-file", "--batch-check"], mirror, check=False, timeout=60, input=asked)
        lines = found.stdout.splitlines()
        if (
            found.returncode
            or len(lines) != len(shas)
            or any(" commit " not in f"{x} " for x in lines)
        ):
            return None
        return [line.split()[0] for line in lines]

    def ensure(
        self,
        repo: str,
        clone_url: str,
        token: TokenLike | None = None,
        *,
        sha: str | None = None,
        refs: Sequence[str] = (),
        also: Sequence[str] = (),
        timeout: float = 1800.0,
    ) -> Path:
        """The mirror, created or brought up to date. With `sha` (and the further commits
        `also`, e.g. a rebase's base tip) already present nothing is fetched; `refs` (e.g.
        `refs/pull/7/head`) are fetched besides branches and tags."""
        mirror = self.mirror_path(repo)
        wanted = [s for s in (sha, *also) if s]
        if wanted and self.holds(repo, wanted):
            return mirror
        with self.lock(repo) as waited:
            if not (mirror / "HEAD").exists():
                tmp = mirror.with_name(mirror.name + ".new")
                shutil.rmtree(tmp, ignore_errors=True)
                git(["init", "--bare", "--quiet", str(tmp)], timeout=60)
                os.replace(tmp, mirror)
            elif waited and wanted and self.holds(repo, wanted):
                return mirror  # another job fetched it while we waited
            # From the URL itself, not a remote in the mirror's config: one git process fewer,
            # and a renamed repository's new URL needs no config change.
            specs = [*HEADS, *(f"+{r}:{r}" for r in refs)]
            git(
                [*FETCH, "--prune", "--no-write-fetch-head", clone_url, *specs],
                mirror,
                token,
                timeout=timeout,
            )
            if needs_gc(mirror):
                drop_old_job_refs(mirror)  # each job leaves its refs: the gc lets the old go
                git(["gc", "--auto", "--quiet"], mirror, timeout=timeout)
        if wanted and not self.holds(repo, wanted):  # a name, not a sha, is looked up alone
            if missing := [s for s in wanted if not self.has(repo, s)]:
                raise RepoCacheError(f"{repo} has no commit {', '.join(missing)} after fetching")
        return mirror

    def commit(
        self,
        repo: str,
        rev: str,
        clone_url: str,
        token: TokenLike | None = None,
        *,
        refs: Sequence[str] = (),
        also: Sequence[str] = (),
    ) -> str:
        """The sha of the commit `rev` names, in a mirror brought up to date first (`ensure`,
        with the further commits `also`) unless `rev` is a full sha the mirror holds already
        with them: then one git process."""
        mirror = self.mirror_path(repo)
        if _SHA.match(rev) and (held := self._commits(repo, [rev, *also])) is not None:
            return held[0]
        self.ensure(repo, clone_url, token, sha=rev, refs=refs, also=also)
        return git(["rev-parse", "--verify", f"{rev}^{{commit}}"], mirror).stdout.strip()

    def checkout(
        self,
        repo: str,
        rev: str,
        dest: Path,
        *,
        branch: str | None = None,
        origin_url: str | None = None,
        hardlink: bool | None = None,
    ) -> str:
        """Check `rev` out into the empty directory `dest`; the commit's sha.

        Objects come from the mirror by hard link when `hardlink` (the default when the
        worker is root: the sandbox's user then cannot write the shared files), else by
        copy. There is no alternates file: the workspace works inside the sandbox, where
        the mirror is not. `origin_url` becomes `origin` (a URL without credentials).
        """
        mirror = self.mirror_path(repo)
        if hardlink is None:
            hardlink = os.geteuid() == 0
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise RepoCacheError(f"workspace {dest} is not empty")
        clone = ["clone", "--quiet", "--local", "--no-checkout"]
        if not hardlink:
            clone.append("--no-hardlinks")
        with self.lock(repo, shared=True):
            git([*clone, str(mirror), str(dest)], timeout=600)
        # The workspace is chowned to the sandbox's user after this: the change of ctime and
        # of owner would make the job's first git command re-read (hash) every file, seconds
        # on a large tree. checkStat=minimal leaves mtime and size (racy entries still have
        # their content compared: https://git-scm.com/docs/racy-git), as trustctime does.
        git(["config", "core.trustctime", "false"], dest)
        git(["config", "core.checkStat", "minimal"], dest)
        sha = git(["rev-parse", "--verify", f"{rev}^{{commit}}"], dest).stdout.strip()
        move = ["checkout", "--quiet", *(["-B", branch] if branch else ["--detach"]), sha]
        git(move, dest, timeout=600, config=PARALLEL)
        if origin_url:
            git(["remote", "set-url", "origin", origin_url], dest)
        else:
            git(["remote", "remove", "origin"], dest)
        return sha

    def refresh(
        self,
        repo: str,
        rev: str,
        dest: Path,
        *,
        branch: str | None = None,
        origin_url: str | None = None,
        also: Sequence[str] = (),
    ) -> str:
        """Move a checkout that `checkout` made, and that no job has touched since (a primed
        pool workspace), to `rev`: only missing objects are fetched, only changed files
        written. Its branches are brought up to date too, as a fresh `checkout` would have
        them: a rebase onto a base that moved since the workspace was primed needs the new
        base. `also`: further commits (full shas) it must hold, such as that base's tip even
        when only an onloop ref reaches it in the mirror. The commit's sha."""
        trust = {"safe.directory": str(dest)}  # owned by the sandbox's uid, made by us
        wanted = ["+refs/heads/*:refs/remotes/origin/*", *(s for s in also if _SHA.match(s))]
        if _SHA.match(rev):
            wanted.append(rev)  # a sha the workspace has already costs the fetch nothing
        else:
            missing = git(["cat-file", "-e", f"{rev}^{{commit}}"], dest, check=False, config=trust)
            wanted += [rev] if missing.returncode else []
        with self.lock(repo, shared=True):
            git(
                [*FETCH, "--no-tags", "--prune", str(self.mirror_path(repo)), *wanted],
                dest,
                config=trust,
                timeout=600,
            )
        target = rev
        if not _SHA.match(rev):
            sha = git(["rev-parse", "--verify", f"{rev}^{{commit}}"], dest, config=trust)
            target = sha.stdout.strip()
        move = ["checkout", "--quiet", *(["-B", branch] if branch else ["--detach"]), target]
        moving = {**trust, **PARALLEL}
        if git(move, dest, config=moving, timeout=600, check=False).returncode:
            git([*move[:2], "--force", *move[2:]], dest, config=moving, timeout=600)
        if origin_url:
            git(["remote", "set-url", "origin", origin_url], dest, config=trust)
        return target

    def dependency_blobs(
        self, repo: str, rev: str, patterns: Sequence[str]
    ) -> list[tuple[str, str]]:
        """(path, blob id) of the files at `rev` whose path matches one of `patterns`;
        read from the mirror, so no checkout and no file from the job is opened."""
        mirror = self.mirror_path(repo)
        dirs = sorted({os.path.dirname(p) for p in patterns if "/" in p})
        listing = git(["ls-tree", "-z", rev, "--", *[f"{d}/" for d in dirs]], mirror).stdout
        listing += git(["ls-tree", "-z", rev], mirror).stdout
        found = []
        for entry in listing.split("\0"):
            if not entry:
                continue
            meta, path = entry.split("\t", 1)
            _, kind, blob = meta.split()
            if kind == "blob" and any(fnmatch.fnmatchcase(path, p) for p in patterns):
                found.append((path, blob))
        return sorted(set(found))

    def import_bundle(self, repo: str, bundle: Path, ref: str) -> str:
        """Fetch the commits a job made (a `git bundle` taken from its workspace) into the
        mirror as `ref`; git never reads the workspace's own config. The tip's sha."""
        mirror = self.mirror_path(repo)
        if not ref.startswith("refs/onloop/"):
            raise ValueError("job results go under refs/onloop/")
        with self.lock(repo):
            heads = git(["bundle", "list-heads", str(bundle)], mirror).stdout.split()
            if not heads:
                raise RepoCacheError("the bundle has no commits")
            git(
                [*FETCH, "--no-tags", str(bundle), f"+{heads[1]}:{ref}"],
                mirror,
                config={"transfer.fsckObjects": "true"},
            )
        return git(["rev-parse", ref], mirror).stdout.strip()

    def push(
        self,
        repo: str,
        clone_url: str,
        rev: str,
        dest_ref: str,
        token: TokenLike,
        *,
        lease: str | None = None,
        timeout: float = 600.0,
        create: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Push `rev` from the mirror to `dest_ref` on GitHub; `lease` is the sha the remote
        ref must still have (a rebase's --force-with-lease), or "" when it must not exist.
        `create`: (rev, ref) pairs of new refs pushed in the same `--atomic` push, so all of
        them land or none does; each must not exist yet."""
        args = ["push", "--quiet", "--porcelain"]
        if lease is not None:
            args.append(f"--force-with-lease={dest_ref}:{lease}")
        if create:
            args.append("--atomic")
            args += [f"--force-with-lease={ref}:" for _, ref in create]
        with self.lock(repo, shared=True):
            git(
                [*args, clone_url, f"{rev}:{dest_ref}", *(f"{r}:{ref}" for r, ref in create)],
                self.mirror_path(repo),
                token,
                timeout=timeout,
            )
