"""The command agent's bookkeeping around its command, in one sandbox command each side."""

# Before it runs: keep the repository's own TASK.md, write the task, keep both files out of
# `git add -A`; after it: put TASK.md back, read and remove the usage file. (Six execs before.)

from __future__ import annotations

import base64
import binascii

from tasks.agent.workspace import CHUNK, MAX_FILE_BYTES, RESOLVE, ToolError
from tasks.sandbox.base import ExecResult, Sandbox

USAGE_LIMIT = 10_000  # bytes of the usage file read at most

# $1 the task file, $2 the read limit, $3 the exclude lines' script, $4... the new content
# (base64 chunks). Prints "was" and the old content's base64 when it held a regular file
# of at most $2 bytes, else "none"; exits 3/4 when the path cannot be written.
_BEFORE = (
    RESOLVE
    + r"""
r=$(resolve "$1") || exit 3
writable "$r" "$1" || exit $?
if [ -f "$r" ] && n=$(wc -c < "$r") && [ "$n" -le "$2" ]; then
  echo was; base64 < "$r" || exit 4
else
  echo none
fi
mkdir -p "${r%/*}" || exit 4
exclude=$3
shift 3
put "$r" "$@" || exit 4
(eval "$exclude") >/dev/null 2>&1 || true
"""
)
# $1 the task file, $2 the usage file, $3 its read limit, $4 "remove" or "write", $5...
# the old content (base64 chunks). Puts the task file back (exits 3/4 when it cannot), then
# prints "usage" and the usage file's base64 (and removes it) when it is a regular file.
_AFTER = (
    RESOLVE
    + r"""
task=$1 usage=$2 limit=$3 mode=$4
shift 4
r=$(resolve "$task") || exit 3
if [ "$mode" = remove ]; then
  rm -f "$r" || exit 4
else
  writable "$r" "$task" || exit $?
  put "$r" "$@" || exit 4
fi
u=$(resolve "$usage") || exit 0
if [ -f "$u" ] && n=$(wc -c < "$u") && [ "$n" -le "$limit" ]; then
  echo usage; base64 < "$u" && rm -f "$u"
fi
exit 0
"""
)


def _chunks(data: bytes) -> list[str]:
    encoded = base64.b64encode(data).decode("ascii")
    return [encoded[i : i + CHUNK] for i in range(0, len(encoded), CHUNK)]


def _failed(result: ExecResult, what: str) -> ToolError:
    message = result.stderr.strip() or result.stdout.strip() or f"exit code {result.exit_code}"
    return ToolError(f"{what}: {'timed out' if result.timed_out else message[-500:]}")


def _tagged(result: ExecResult, tag: str) -> bytes | None:
    """The base64 block printed after the line `tag`, decoded; None without one."""
    head, _, rest = result.stdout.partition("\n")
    if head != tag or result.truncated:
        return None
    try:
        return base64.b64decode(rest)
    except binascii.Error:
        return None


def place_task(sandbox: Sandbox, path: str, data: bytes, exclude: str) -> bytes | None:
    """Write `data` to `path` and run `exclude` (its failure ignored), in one command; what
    `path` held before (None: nothing, or not a regular file of at most MAX_FILE_BYTES)."""
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: {len(data)} bytes is more than the {MAX_FILE_BYTES} allowed")
    args = [path, str(MAX_FILE_BYTES), exclude, *_chunks(data)]
    result = sandbox.exec(["/bin/sh", "-c", _BEFORE, "sh", *args], timeout=60)
    if not result.ok:
        raise _failed(result, "write failed")
    return _tagged(result, "was")


def restore_task(sandbox: Sandbox, path: str, previous: bytes | None, usage: str) -> bytes | None:
    """Put `previous` back at `path` (remove it when None), then take the file `usage`: its
    bytes (it is removed), or None when there is none to read. ToolError when `path` could
    not be put back."""
    mode = ["remove"] if previous is None else ["write", *_chunks(previous)]
    args = [path, usage, str(USAGE_LIMIT), *mode]
    result = sandbox.exec(["/bin/sh", "-c", _AFTER, "sh", *args], timeout=60)
    if not result.ok:
        raise _failed(result, "restore failed")
    return _tagged(result, "usage")
