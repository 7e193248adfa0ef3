"""Real bare git repositories on disk: objects written directly, everything else via git."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Double",
    "GIT_AUTHOR_EMAIL": "double@example.invalid",
    "GIT_COMMITTER_NAME": "Double",
    "GIT_COMMITTER_EMAIL": "double@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}


def git(
    git_dir: Path,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run git against a bare repository; stdout as text."""
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args],
        input=input,
        capture_output=True,
        env=full_env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode()


def _serve_config(git_dir: Path) -> None:
    # pushes are authorised by the double; allowAnySHA1InWant helps shallow fetches by sha.
    with (git_dir / "config").open("a") as config:
        config.write("[http]\n\treceivepack = true\n[uploadpack]\n\tallowAnySHA1InWant = true\n")


def init_bare(git_dir: Path, default_branch: str) -> None:
    """A bare repository, laid out by hand (what `git init --bare` makes, minus the samples)."""
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text(f"ref: refs/heads/{default_branch}\n")
    (git_dir / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
    )
    _serve_config(git_dir)


def clone_bare(source: Path, git_dir: Path) -> None:
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "clone", "--bare", "-q", str(source), str(git_dir)],
        check=True,
        env={**os.environ, **GIT_ENV},
    )
    _serve_config(git_dir)


def rev(git_dir: Path, ref: str) -> str | None:
    """The commit sha `ref` names, or None (branches are read from disk, the rest via git)."""
    if ref.startswith("refs/heads/") and ".." not in ref:
        loose = git_dir / ref
        if loose.is_file():
            return loose.read_text().strip()
        packed = git_dir / "packed-refs"
        if not packed.exists():
            return None
        for line in packed.read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
        return None
    out = git(git_dir, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False).strip()
    return out or None


def refs(git_dir: Path) -> dict[str, str]:
    """Every ref and the object it points at."""
    out = git(git_dir, "for-each-ref", "--format=%(objectname) %(refname)")
    return {name: sha for sha, name in (line.split(" ", 1) for line in out.splitlines())}


def _write_object(git_dir: Path, kind: str, data: bytes) -> str:
    """Store a loose object; its sha."""
    raw = b"%s %d\x00%s" % (kind.encode(), len(data), data)
    sha = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
    path = git_dir / "objects" / sha[:2] / sha[2:]
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(zlib.compress(raw))
        tmp.replace(path)
    return sha


def _write_tree(git_dir: Path, entries: dict[str, Any]) -> str:
    """Write a nested {name: (mode, sha) | {...}} tree; its sha."""
    items = []
    for name, value in entries.items():
        if isinstance(value, dict):
            if not value:
                continue
            mode, sha, sort_key = "40000", _write_tree(git_dir, value), name + "/"
        else:
            (mode, sha), sort_key = value, name
        items.append((sort_key, b"%s %s\x00" % (mode.encode(), name.encode()) + bytes.fromhex(sha)))
    return _write_object(git_dir, "tree", b"".join(e for _, e in sorted(items)))


def commit(
    git_dir: Path,
    branch: str,
    files: dict[str, str | bytes | None],
    message: str,
    author: tuple[str, str] | None = None,
) -> str:
    """Commit `files` (None deletes a path) on top of `branch` (created if missing); the new sha.

    Objects are written directly, so building fixtures costs at most one git process."""
    ref = f"refs/heads/{branch}"
    parent = (
        rev(git_dir, ref)
        if (git_dir / "packed-refs").exists() or (git_dir / ref).exists()
        else None
    )
    tree: dict[str, Any] = {}

    def place(path: str, value: tuple[str, str] | None) -> None:
        *dirs, name = path.strip("/").split("/")
        node = tree
        for d in dirs:
            node = node.setdefault(d, {})
        if value is None:
            node.pop(name, None)
        else:
            node[name] = value

    if parent:
        listing = git(git_dir, "ls-tree", "-r", "-z", parent)
        for entry in filter(None, listing.split("\x00")):
            meta, path = entry.split("\t", 1)
            mode, _kind, sha = meta.split()
            place(path, (mode, sha))
    for path, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        place(path, None if data is None else ("100644", _write_object(git_dir, "blob", data)))
    name, email = author or (GIT_ENV["GIT_AUTHOR_NAME"], GIT_ENV["GIT_AUTHOR_EMAIL"])
    when = f"{int(time.time())} +0000"
    lines = [f"tree {_write_tree(git_dir, tree)}"] + ([f"parent {parent}"] if parent else [])
    lines += [
        f"author {name} <{email}> {when}",
        f"committer {GIT_ENV['GIT_COMMITTER_NAME']} <{GIT_ENV['GIT_COMMITTER_EMAIL']}> {when}",
        "",
        message.rstrip("\n") + "\n",
    ]
    sha = _write_object(git_dir, "commit", "\n".join(lines).encode())
    ref_path = git_dir / ref
    ref_path.parent.mkdir(parents=True, exist_ok=True)
    ref_path.write_text(sha + "\n")
    return sha


def read_object(git_dir: Path, ref: str, path: str) -> tuple[str, str, bytes] | None:
    """(type, sha, raw content) of `path` at `ref` (a tree's content is git's binary form)."""
    spec = f"{ref}:{path.strip('/')}" if path.strip("/") else f"{ref}^{{tree}}"
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch"],
        input=spec.encode() + b"\n",
        capture_output=True,
        check=True,
        env={**os.environ, **GIT_ENV},
    ).stdout
    header, _, rest = out.partition(b"\n")
    parts = header.decode().split()
    if len(parts) != 3:
        return None  # "<spec> missing"
    sha, kind, size = parts
    return kind, sha, rest[: int(size)]


def list_tree(git_dir: Path, ref: str, path: str) -> list[tuple[str, str, str, int]]:
    """(type, sha, path, size) for each entry of the directory `path` at `ref`."""
    spec = f"{ref}:{path.strip('/')}" if path.strip("/") else f"{ref}^{{tree}}"
    out = git(git_dir, "ls-tree", "-l", spec)
    entries = []
    prefix = f"{path.strip('/')}/" if path.strip("/") else ""
    for line in out.splitlines():
        meta, name = line.split("\t", 1)
        _mode, kind, sha, size = meta.split()
        entries.append((kind, sha, prefix + name, int(size) if size != "-" else 0))
    return entries


def commit_info(git_dir: Path, sha: str) -> dict[str, str | list[str]]:
    out = git(git_dir, "show", "-s", "--format=%H%n%T%n%P%n%an%n%ae%n%aI%n%cn%n%ce%n%cI%n%B", sha)
    lines = out.split("\n")
    return {
        "sha": lines[0],
        "tree": lines[1],
        "parents": lines[2].split(),
        "author_name": lines[3],
        "author_email": lines[4],
        "author_date": lines[5],
        "committer_name": lines[6],
        "committer_email": lines[7],
        "committer_date": lines[8],
        "message": "\n".join(lines[9:]).strip(),
    }


def is_ancestor(git_dir: Path, ancestor: str, descendant: str) -> bool:
    args = ["git", f"--git-dir={git_dir}", "merge-base", "--is-ancestor", ancestor, descendant]
    return subprocess.run(args, capture_output=True, check=False).returncode == 0
