"""The command agent's bookkeeping and its command, in one sandbox command."""

# Before the command: keep the repository's own TASK.md, write the task, keep both files out
# of `git add -A`; after it: put TASK.md back, read and remove the usage file. All of it in
# the shell that runs the command (three execs before, six before that); only when that shell
# is killed (time, cancel) does a second command put TASK.md back.

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass

from tasks.agent.workspace import CHUNK, MAX_FILE_BYTES, RESOLVE, ToolError
from tasks.sandbox.base import ExecResult, Sandbox

USAGE_LIMIT = 10_000  # bytes of the usage file read at most

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


# $1 the task file, $2 the read limit, $3 the exclude lines' script, $4 the usage file, $5
# its read limit, $6 the command, $7... the task (base64 chunks). The command's own stdout and
# stderr are the exec's stdout; this script speaks on stderr only, a line a fact: `was <b64>`
# or `was-none` (what TASK.md held), `placed` (the command runs now), `restored`, `usage <b64>`.
# Exits 3/4 when the task cannot be written (the command does not run), else with the
# command's status.
_WRAPPED = (
    RESOLVE
    + r"""
task=$1 limit=$2 exclude=$3 usage=$4 ulimit=$5 command=$6
shift 6
r=$(resolve "$task") || exit 3
writable "$r" "$task" || exit $?
had="" old=""
if [ -f "$r" ] && n=$(wc -c < "$r") && [ "$n" -le "$limit" ]; then
  old=$(base64 < "$r" | tr -d '\n') || exit 4
  had=1
  echo "was $old" >&2
else
  echo "was-none" >&2
fi
mkdir -p "${r%/*}" || exit 4
put "$r" "$@" || exit 4
(eval "$exclude") >/dev/null 2>&1 || true
echo placed >&2
/bin/sh -c "$command" 2>&1 </dev/null
status=$?
if r=$(resolve "$task"); then
  if [ -z "$had" ]; then
    rm -f "$r" && echo restored >&2
  elif writable "$r" "$task"; then
    put "$r" "$old" && echo restored >&2
  fi
fi
if u=$(resolve "$usage") && [ -f "$u" ] && n=$(wc -c < "$u") && [ "$n" -le "$ulimit" ]; then
  echo "usage $(base64 < "$u" | tr -d '\n')" >&2
  rm -f "$u"
fi
exit $status
"""
)


@dataclass(frozen=True)
class Wrapped:
    """What the one command said of its bookkeeping (stderr), beside the command's result."""

    result: ExecResult  # its stdout is the command's own output, its exit code the command's
    previous: bytes | None  # what TASK.md held (None: nothing, or not a small regular file)
    known: bool  # whether the script said what TASK.md held
    restored: bool  # TASK.md was put back after the command
    usage: bytes | None  # the usage file's bytes, if it left one


def _said(stderr: str) -> dict[str, str]:
    """The script's lines on stderr, by their first word (the first of each counts: what
    the command itself may write there comes after the script's own `was` and `placed`)."""
    found: dict[str, str] = {}
    for line in stderr.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("was", "was-none", "placed", "restored", "usage"):
            found.setdefault(word, rest)
    return found


def _decoded(text: str | None) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        return None


def run_with_task(
    run: Callable[[list[str]], ExecResult],
    path: str,
    data: bytes,
    exclude: str,
    command: str,
    usage: str,
) -> Wrapped:
    """Write `data` to `path`, run `command` (its stderr joined to its stdout), put `path`
    back and take the file `usage`, all in the one sandbox command that `run` executes.
    ToolError when the task could not be written."""
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{path}: {len(data)} bytes is more than the {MAX_FILE_BYTES} allowed")
    args = [path, str(MAX_FILE_BYTES), exclude, usage, str(USAGE_LIMIT), command]
    result = run(["/bin/sh", "-c", _WRAPPED, "sh", *args, *_chunks(data)])
    said = _said(result.stderr)
    if "placed" not in said:
        if result.timed_out:
            raise ToolError("write failed: timed out")
        message = result.stderr.strip() or f"exit code {result.exit_code}"
        raise ToolError(f"write failed: {message[-500:]}")
    return Wrapped(
        result,
        previous=_decoded(said.get("was")),
        known="was-none" in said or _decoded(said.get("was")) is not None,
        restored="restored" in said,
        usage=_decoded(said.get("usage")),
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
