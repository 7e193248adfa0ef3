"""The `command` agent: ONLOOP_AGENT_COMMAND run in the sandbox, the task given in TASK.md."""

from __future__ import annotations

import json
import threading
import time

import tasks.agent.workspace as ws
from tasks.agent.base import AgentResult, AgentTask, Budget, Stop, Transcript, task_markdown
from tasks.agent.task_file import Wrapped, restore_task, run_with_task
from tasks.sandbox.base import WORKDIR, ExecResult, Sandbox, SandboxError

TASK_FILE = "TASK.md"
# Where the command may report what it used: {"input_tokens": n, "output_tokens": n, "model": m}.
USAGE_FILE = ".onloop-usage.json"
# Keep TASK.md and the usage file out of `git add -A` (both are removed afterwards too).
_EXCLUDE = (
    "[ -d .git ] || exit 0; mkdir -p .git/info && touch .git/info/exclude && "
    "{ grep -qxF /TASK.md .git/info/exclude || echo /TASK.md >> .git/info/exclude; } && "
    f"{{ grep -qxF /{USAGE_FILE} .git/info/exclude || echo /{USAGE_FILE} >> .git/info/exclude; }}"
)


class CommandAgent:
    """Runs one shell command line (any command-line agent) in /workspace via `sh -c`.

    The task is in /workspace/TASK.md (also named by $TASK_FILE) while it runs; a TASK.md the
    repository had is put back afterwards. No ONLOOP_* variable or token reaches the command.
    """

    name = "command"

    def __init__(self, command: str, *, tail_chars: int = 6000) -> None:
        self.command = command
        self.tail_chars = tail_chars

    def __repr__(self) -> str:
        return "CommandAgent()"

    def run(
        self, sandbox: Sandbox, task: AgentTask, budget: Budget, cancel: threading.Event
    ) -> AgentResult:
        """Write TASK.md, run the command within the time budget, then remove TASK.md."""
        if cancel.is_set():
            return AgentResult(ran=True, summary="the job was cancelled", stopped=Stop.CANCELLED)
        transcript = Transcript(limit=self.tail_chars)
        timeout = max(1.0, min(budget.wall_seconds, sandbox.remaining))
        begun = time.monotonic()

        def run(argv: list[str]) -> ExecResult:
            return ws.exec_cancellable(
                sandbox,
                argv,
                timeout=timeout,
                cancel=cancel,
                env={
                    "TASK_FILE": f"{WORKDIR}/{TASK_FILE}",
                    "USAGE_FILE": f"{WORKDIR}/{USAGE_FILE}",
                    "AGENT_BUDGET": str(budget.max_tokens),
                },
            )

        data = task_markdown(task).encode("utf-8")
        try:
            wrapped = run_with_task(run, TASK_FILE, data, _EXCLUDE, self.command, USAGE_FILE)
        except SandboxError as exc:
            stopped = Stop.CANCELLED if cancel.is_set() else Stop.ERROR
            return AgentResult(ran=True, summary=f"the sandbox went away: {exc}", stopped=stopped)
        except ws.ToolError as exc:  # e.g. the repository holds a directory named TASK.md
            said = f"the agent command did not run: {TASK_FILE} could not be written ({exc})"
            return AgentResult(ran=True, summary=said, stopped=Stop.ERROR)
        done, reported = wrapped.result, wrapped.usage
        if not wrapped.restored:  # killed (time, cancel) before it could put TASK.md back
            reported = _restore(sandbox, wrapped)
        used = _usage(reported)
        output = done.stdout  # the command's own output, its stderr joined to it
        transcript.add(output, max_chars=self.tail_chars, tail=True)
        elapsed = time.monotonic() - begun
        if cancel.is_set():
            stopped, summary = Stop.CANCELLED, "the job was cancelled"
        elif done.timed_out:
            stopped, summary = Stop.WALL_TIME, f"the agent command ran out of time ({elapsed:.0f}s)"
        elif done.exit_code != 0:
            stopped, summary = Stop.ERROR, f"the agent command exited with code {done.exit_code}"
        elif used[0] + used[1] >= budget.max_tokens:
            stopped = Stop.MAX_TOKENS
            summary = f"stopped after {used[0] + used[1]} tokens (the token budget)"
            summary += "\n" + _last_lines(output)
        else:
            stopped, summary = Stop.FINISHED, _last_lines(output) or "the agent command finished"
        return AgentResult(
            ran=True,
            summary=summary,
            steps=1,
            tokens=used[0] + used[1],
            stopped=stopped,
            transcript_tail=transcript.tail(),
            tokens_in=used[0],
            tokens_out=used[1],
            model=used[2],
        )


def _usage(raw: bytes | None) -> tuple[int, int, str]:
    """What the command reported in $USAGE_FILE (input, output tokens, model); nothing
    reported (or not readable as such) counts as none."""
    try:
        data = json.loads(raw.decode("utf-8")) if raw is not None else None
    except ValueError:
        return 0, 0, ""
    if not isinstance(data, dict):
        return 0, 0, ""

    def count(name: str) -> int:
        value = data.get(name)
        return value if isinstance(value, int) and value > 0 else 0

    model = data.get("model")
    return count("input_tokens"), count("output_tokens"), model if isinstance(model, str) else ""


def _restore(sandbox: Sandbox, wrapped: Wrapped) -> bytes | None:
    """TASK.md put back, and what the command reported in $USAGE_FILE (then removed), in a
    command of its own, when the one that ran the agent was killed first; nothing once the
    sandbox is gone. ToolError when TASK.md cannot be put back as it was."""
    if sandbox.stopped:
        return None
    if not wrapped.known:
        raise ws.ToolError(f"restore failed: what {TASK_FILE} held before was not said")
    try:
        return restore_task(sandbox, TASK_FILE, wrapped.previous, USAGE_FILE)
    except (ws.ToolError, SandboxError):
        if not sandbox.stopped:
            raise
        return None


def _last_lines(output: str, count: int = 15, chars: int = 2000) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return "\n".join(lines[-count:])[-chars:]
