"""Synthetic repositories of a given size for bench/size.py, made with `git fast-import`.

A repository of about `mb` MB (its pack) has 40 text files a MB in nested directories, 5
commits a MB that each change a few of them, and incompressible binary blobs (about 88% of
the size) of which half are replaced later in history, so history and tree both grow.
Built once into `cache/size-<mb>.git` and reused; building 1 GB took about two minutes here.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

BLOB_MB = 8  # the size of one binary blob (at most)
WHEN = 1_700_000_000


def _data(payload: bytes) -> bytes:
    return b"data %d\n%s\n" % (len(payload), payload)


def _text(rng: random.Random, n: int, version: int) -> bytes:
    lines = [b"# file %d version %d\n" % (n, version)]
    for i in range(rng.randint(8, 60)):
        lines.append(b"line %d = %s\n" % (i, rng.randbytes(24).hex().encode()))
    return b"".join(lines)


def _path(n: int) -> bytes:
    return b"src/d%02d/e%02d/file%05d.txt" % (n % 37, (n // 37) % 29, n)


def _commit(mark: int, message: str, changes: list[bytes], parent: int | None) -> Iterator[bytes]:
    yield b"commit refs/heads/main\nmark :%d\n" % mark
    yield b"committer Bench <bench@example.com> %d +0000\n" % (WHEN + mark)
    yield _data(message.encode())
    if parent is not None:
        yield b"from :%d\n" % parent
    yield from changes


def stream(mb: int, seed: int = 20) -> Iterator[bytes]:
    """The fast-import stream of the `mb` MB repository."""
    rng = random.Random(seed)
    files, commits = max(40, mb * 40), max(5, mb * 5)
    blob_total = int(mb * 0.88 * 1e6)
    blob_size = min(BLOB_MB << 20, max(64 << 10, blob_total // 8))
    blobs = max(1, blob_total // blob_size)
    first = [b"M 100644 inline %s\n%s" % (_path(n), _data(_text(rng, n, 0))) for n in range(files)]
    first.append(b"M 100644 inline README.md\n" + _data(b"synthetic %d MB repository\n" % mb))
    in_tree = max(1, blobs // 2)  # the rest replace these, later in history
    for b in range(in_tree):
        first.append(b"M 100644 inline assets/blob%03d.bin\n" % b + _data(rng.randbytes(blob_size)))
    yield from _commit(1, "Initial commit", first, None)
    replace_every = max(1, commits // max(1, blobs - in_tree))
    replaced = 0
    for c in range(2, commits + 1):
        changes = []
        for _ in range(3):
            n = rng.randrange(files)
            changes.append(b"M 100644 inline %s\n%s" % (_path(n), _data(_text(rng, n, c))))
        if c % replace_every == 0 and replaced < blobs - in_tree:
            name = b"assets/blob%03d.bin" % (replaced % in_tree)
            changes.append(b"M 100644 inline %s\n%s" % (name, _data(rng.randbytes(blob_size))))
            replaced += 1
        yield from _commit(c, f"Change {c}", changes, c - 1)


def build(cache: Path, mb: int) -> Path:
    """The bare repository of about `mb` MB under `cache`, built if missing."""
    dest = cache / f"size-{mb}.git"
    if (dest / "refs" / "heads" / "main").exists() or (dest / "packed-refs").exists():
        return dest
    tmp = dest.with_name(dest.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(tmp)], check=True)
    proc = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--depth=10"], cwd=tmp, stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    buffered: list[bytes] = []
    size = 0
    for chunk in stream(mb):
        buffered.append(chunk)
        size += len(chunk)
        if size > 1 << 22:
            proc.stdin.write(b"".join(buffered))
            buffered, size = [], 0
    proc.stdin.write(b"".join(buffered))
    proc.stdin.close()
    if proc.wait():
        raise RuntimeError(f"git fast-import failed for the {mb} MB repository")
    tmp.rename(dest)
    return dest


def pack_mb(git_dir: Path) -> float:
    """The repository's objects on disk, in MB."""
    total = sum(p.stat().st_size for p in (git_dir / "objects").rglob("*") if p.is_file())
    return total / 1e6


def tree_stats(git_dir: Path) -> tuple[int, float]:
    """Files and MB in main's tree."""
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-l", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return len(out), sum(int(line.split()[3]) for line in out) / 1e6
