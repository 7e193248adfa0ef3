"""A mirror's upkeep: git's own test for a gc, and onloop's job refs kept to the newest."""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from pathlib import Path

from tasks.git.process import git

_OBJECT_NAME = re.compile(r"^[0-9a-f]{38}([0-9a-f]{24})?$")  # a loose object's file name
GC_AUTO, GC_AUTO_PACK_LIMIT = 6700, 50  # git's defaults for gc.auto and gc.autoPackLimit
# refs/onloop/job-<id> (and job-<id>-<what>): where a job's commits land in the mirror. Only
# the job reads them, while it runs; once it ended they are on GitHub or nowhere. The newest
# ones stay, so a gc never pulls a ref from under a job that is still pushing.
JOB_REF = re.compile(r"^refs/onloop/job-(\d+)(-[a-z]+)?$")
KEEP_JOB_REFS = 200


def needs_gc(repo: Path) -> bool:
    """`git gc --auto`'s own test, without starting git: more than gc.auto loose objects,
    estimated as git does from objects/17 (one of 256 directories), or more than
    gc.autoPackLimit packs without a .keep file
    (https://git-scm.com/docs/git-gc#Documentation/git-gc.txt-gcauto)."""
    loose, packs = repo / "objects" / "17", repo / "objects" / "pack"
    sampled = sum(1 for n in os.listdir(loose) if _OBJECT_NAME.match(n)) if loose.is_dir() else 0
    kept = packs.glob("*.idx") if packs.is_dir() else iter(())
    packed = sum(1 for idx in kept if not idx.with_suffix(".keep").exists())
    return sampled > math.ceil(GC_AUTO / 256) or packed > GC_AUTO_PACK_LIMIT


def drop_old_job_refs(repo: Path, keep: int = KEEP_JOB_REFS) -> list[str]:
    """Delete the job refs of all but the `keep` newest job ids (ids grow), so that a gc
    lets their commits go; the refs deleted. Other refs under refs/onloop/ stay."""
    listing = git(["for-each-ref", "--format=%(refname)", "refs/onloop/"], repo).stdout
    by_job: dict[int, list[str]] = defaultdict(list)
    for ref in listing.split():
        if found := JOB_REF.match(ref):
            by_job[int(found[1])].append(ref)
    old = sorted(by_job)[: max(len(by_job) - keep, 0)]
    doomed = [ref for job in old for ref in by_job[job]]
    if doomed:
        git(["update-ref", "--stdin"], repo, input="".join(f"delete {r}\n" for r in doomed))
    return doomed
