"""File and command operations for agents, all run by `sandbox.exec` and confined to /workspace."""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping, Sequence

from tasks.sandbox.base import WORKDIR, ExecResult, Sandbox

MAX_FILE_BYTES = 512 * 1024  # read, edit and write limit for one file
CHUNK = 96 * 1024  # base64 characters per argument (the kernel allows 128 KiB per argument)
MAX_LIST = 1000

# Resolves a relative path to its real location inside the sandbox and refuses anything
# outside /workspace (a symlink to /etc, say). The path's missing tail, if any, cannot hold
# symlinks; the existing part is resolved by `realpath` (GNU or busybox). Also used by
# tasks.agent.task_file.
RESOLVE = r"""
ws=/workspace
resolve() {
  p="$ws/$1"; rest=""
  while [ ! -e "$p" ] && [ ! -L "$p" ]; do
    [ "$p" != "$ws" ] || return 3
    rest="/${p##*/}$rest"; p="${p%/*}"
  done
  r=$(realpath "$p" 2>/dev/null) || { echo "$1: a dangling symlink" >&2; return 3; }
  r="$r$rest"
  case "$r" in
    "$ws"|"$ws"/*) printf '%s' "$r" ;;
    *) echo "$1: resolves outside /workspace (refused)" >&2; return 3 ;;
  esac
}
writable() {  # $1 a resolved path, $2 the path as asked
  case "$1/" in "$ws/.git/"*) echo "$2: refusing to write inside .git" >&2; return 3 ;; esac
  [ ! -d "$1" ] || { echo "$2: is a directory" >&2; return 4; }
}
put() {  # $1 a resolved path; the rest: its new content, in base64 chunks
  t=$1; shift
  for c in "$@"; do printf '%s' "$c"; done | base64 -d > "$t"
}
"""
_READ = (
    RESOLVE
    + r"""
r=$(resolve "$1") || exit 3
[ -f "$r" ] || { echo "$1: no such file" >&2; exit 4; }
n=$(wc -c < "$r") || exit 4
[ "$n" -le "$2" ] || { echo "$1: $n bytes, more than the $2 this tool reads" >&2; exit 5; }
base64 < "$r"
"""
)
_WRITE = (
    RESOLVE
    + r"""
r=$(resolve "$1") || exit 3
writable "$r" "$1" || exit $?
mkdir -p "${r%/*}" || exit 4
shift
put "$r" "$@" || exit 4
"""
)
_LIST = (
    RESOLVE
    + r"""
r=$(resolve "$1") || exit 3
[ -d "$r" ] || { echo "$1: not a directory" >&2; exit 4; }
cd "$r" && find . -mindepth 1 -maxdepth "$2" -name .git -prune -o ! -type d -print | head -n "$3"
"""
)
_REMOVE = (
    RESOLVE
    + r"""
r=$(resolve "$1") || exit 3
rm -f "$r"
"""
)


class ToolError(Exception):
    """A tool call that cannot be done; the message goes back to the model as the result."""


def clean_path(path: object, *, writing: bool = False) -> str:
    """A path relative to /workspace, or ToolError: no absolute paths (bar /workspace/...),
    no `..`, and no writes into `.git`."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("a path is required")
    p = path.strip()
    if "\x00" in p:
        raise ToolError("a path cannot contain NUL")
    if p == WORKDIR or p.startswith(WORKDIR + "/"):
        p = p[len(WORKDIR) :]
        p = p.lstrip("/") or "."
    if p.startswith("/"):
        raise ToolError(f"{path}: absolute paths are refused; use a path relative to /workspace")
    parts = [part for part in p.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ToolError(f"{path}: '..' is refused; stay inside /workspace")
    if writing and parts and parts[0] == ".git":
        raise ToolError(f"{path}: refusing to write inside .git")
    return "/".join(parts) or "."


def _failed(result: ExecResult, what: str) -> ToolError:
    message = result.stderr.strip() or result.stdout.strip() or f"exit code {result.exit_code}"
    if result.timed_out:
        message = "timed out"
    return ToolError(f"{what}: {message[-500:]}")


def read_bytes(sandbox: Sandbox, path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The exact bytes of a workspace file (`path` already cleaned)."""
    result = sandbox.exec(["/bin/sh", "-c", _READ, "sh", path, str(limit)], timeout=60)
    if not result.ok:
        raise _failed(result, "read failed")
    if result.truncated:
        raise ToolError(f"{path}: too large to read")
    try:
        return base64.b64decode(result.stdout)
    except binascii.Error as exc:
        raise ToolError(f"{path}: could not read ({exc})") from exc


def read_text(sandbox: Sandbox, path: str) -> str:
    """A workspace file as UTF-8 text, or ToolError for binary files."""
    data = read_bytes(sandbox, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path}: not a UTF-8 text file") from exc


def write_bytes(sandbox: Sandbox, path: str, data: bytes) -> None:
    """Create or replace a workspace file (`path` cleaned with writing=True); parents made."""
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: {len(data)} bytes is more than the {MAX_FILE_BYTES} allowed")
    encoded = base64.b64encode(data).decode("ascii")
    chunks = [encoded[i : i + CHUNK] for i in range(0, len(encoded), CHUNK)]
    result = sandbox.exec(["/bin/sh", "-c", _WRITE, "sh", path, *chunks], timeout=60)
    if not result.ok:
        raise _failed(result, "write failed")


def remove_file(sandbox: Sandbox, path: str) -> None:
    """Delete a workspace file if it is there."""
    result = sandbox.exec(["/bin/sh", "-c", _REMOVE, "sh", path], timeout=60)
    if not result.ok:
        raise _failed(result, "remove failed")


def list_files(sandbox: Sandbox, path: str, depth: int = 3, limit: int = MAX_LIST) -> list[str]:
    """Files (not directories) under `path`, relative to it, sorted; .git left out."""
    args = ["/bin/sh", "-c", _LIST, "sh", path, str(max(1, depth)), str(limit + 1)]
    result = sandbox.exec(args, timeout=60)
    if not result.ok:
        raise _failed(result, "list failed")
    return sorted(line.removeprefix("./") for line in result.stdout.splitlines() if line)


def edit_text(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, int]:
    """`text` with `old` replaced by `new`, and how many times; ToolError when `old` is
    missing, or ambiguous without `replace_all`."""
    if not old:
        raise ToolError("old_string must not be empty")
    count = text.count(old)
    if count == 0:
        raise ToolError("old_string was not found; read the file and copy the text exactly")
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times; add surrounding lines to make it unique "
            "or set replace_all"
        )
    return text.replace(old, new), count


def interrupt(sandbox: Sandbox) -> None:
    """Stop whatever runs in the sandbox: kill its processes if the backend can, else stop it."""
    kill = getattr(sandbox, "kill_processes", None)
    if callable(kill) and kill():
        return
    sandbox.stop()


def exec_cancellable(
    sandbox: Sandbox,
    cmd: str | Sequence[str],
    *,
    timeout: float,
    cancel: threading.Event,
    env: Mapping[str, str] | None = None,
) -> ExecResult:
    """`sandbox.exec`, but a set `cancel` interrupts the command (see `interrupt`).

    The watcher waits on `cancel` in slices; the command's end releases it at once: once
    `finished` is set under `lock`, it can no longer interrupt, so nothing waits for its
    slice to run out (joining it cost the agent step up to 0.2 s, 0.1 s on average)."""
    finished = False
    lock = threading.Lock()

    def watch() -> None:
        while not finished:
            if cancel.wait(0.2):
                with lock:
                    if not finished:
                        interrupt(sandbox)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return sandbox.exec(cmd, timeout=timeout, env=env)
    finally:
        with lock:  # an interrupt under way ends first
            finished = True
