"""The tools an LLM agent may call, as chat-completions schemas, and what each one does."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import tasks.agent.workspace as ws
from tasks.agent.base import AgentTask, Finding
from tasks.sandbox.base import Sandbox, SandboxError

READ_TOOLS = ("read_file", "list_files", "comment", "finish")
WRITE_TOOLS = ("run_command", "read_file", "write_file", "edit", "list_files", "finish")
COMMAND_TIMEOUT = 600.0  # the most one run_command may take
OUTPUT_CHARS = 12_000  # run_command output fed back to the model (the tail)
READ_CHARS = 40_000  # read_file text fed back to the model

_PATH = {"type": "string", "description": "path relative to /workspace"}
SCHEMAS: dict[str, dict[str, Any]] = {
    "run_command": {
        "description": "Run a shell command (sh -c) in /workspace; returns exit code and output.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "integer", "description": "seconds, default 300"},
            },
            "required": ["command"],
        },
    },
    "read_file": {
        "description": "Read a text file, optionally only lines start_line..end_line (1-based).",
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
            },
            "required": ["path"],
        },
    },
    "write_file": {
        "description": "Create or overwrite a file with the given content.",
        "parameters": {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    "edit": {
        "description": "Replace an exact string in a file. old_string must occur exactly once "
        "unless replace_all is true.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            "required": ["path", "old_string", "new_string"],
        },
    },
    "list_files": {
        "description": "List files under a directory (default: the whole workspace).",
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "max_depth": {"type": "integer", "description": "default 3"},
            },
        },
    },
    "comment": {
        "description": "Report one problem in the change: a review comment on path at line.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": _PATH,
                "line": {"type": "integer", "description": "line in the new file, 1-based"},
                "body": {"type": "string", "description": "Markdown; may hold a suggestion"},
            },
            "required": ["path", "line", "body"],
        },
    },
    "finish": {
        "description": "Stop: the task is done (or cannot be done). Summarise what you did.",
        "parameters": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
}


def tool_names(task: AgentTask) -> tuple[str, ...]:
    """The tools offered for `task`: read-only ones for a review."""
    return READ_TOOLS if task.is_read_only else WRITE_TOOLS


def tool_specs(task: AgentTask) -> list[dict[str, Any]]:
    """The `tools` array of a chat-completions request for `task`."""
    return [
        {"type": "function", "function": {"name": name, **SCHEMAS[name]}}
        for name in tool_names(task)
    ]


@dataclass
class ToolBox:
    """Runs one job's tool calls in its sandbox; `deadline` is a time.monotonic() value."""

    sandbox: Sandbox
    task: AgentTask
    cancel: threading.Event
    deadline: float
    findings: list[Finding] = field(default_factory=list)
    finished: str | None = None  # the finish summary, once called

    def call(self, name: str, arguments: str) -> str:
        """The result text of one call; refusals and failures are results too."""
        if name not in tool_names(self.task):
            why = " in a read-only job" if self.task.is_read_only else ""
            return f"error: the tool {name!r} is not available{why}"
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"error: the arguments are not valid JSON ({exc})"
        if not isinstance(args, dict):
            return "error: the arguments must be a JSON object"
        try:
            result: str = getattr(self, f"_{name}")(args)
            return result
        except ws.ToolError as exc:
            return f"error: {exc}"
        except (TypeError, ValueError) as exc:
            return f"error: bad arguments ({exc})"

    def _run_command(self, args: dict[str, Any]) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ws.ToolError("command is required")
        wanted = float(args.get("timeout") or 300)
        timeout = max(1.0, min(wanted, COMMAND_TIMEOUT, self.deadline - time.monotonic()))
        try:
            done = ws.exec_cancellable(
                self.sandbox,
                ["/bin/sh", "-c", "exec 2>&1\n" + command],
                timeout=timeout,
                cancel=self.cancel,
            )
        except SandboxError as exc:
            raise ws.ToolError(f"the sandbox is gone ({exc})") from exc
        output = done.output
        if len(output) > OUTPUT_CHARS:
            output = f"[… {len(output) - OUTPUT_CHARS} chars cut …]\n" + output[-OUTPUT_CHARS:]
        state = f"timed out after {timeout:.0f}s" if done.timed_out else f"{done.exit_code}"
        return f"exit code: {state}\n{output}"

    def _read_file(self, args: dict[str, Any]) -> str:
        path = ws.clean_path(args.get("path"))
        text = ws.read_text(self.sandbox, path)
        lines = text.splitlines(keepends=True)
        start, end = args.get("start_line"), args.get("end_line")
        if start is not None or end is not None:
            first = max(1, int(start or 1))
            last = min(len(lines), int(end or len(lines)))
            text = "".join(lines[first - 1 : last])
            header = f"[{path}: lines {first}-{last} of {len(lines)}]\n"
        else:
            header = ""
        if len(text) > READ_CHARS:
            shown = text[:READ_CHARS]
            count = shown.count("\n")
            return (
                f"{header}{shown}\n[… cut after line {count} of {len(lines)}; "
                "read further with start_line/end_line]"
            )
        return header + text if text else header + "[empty file]"

    def _write_file(self, args: dict[str, Any]) -> str:
        path = ws.clean_path(args.get("path"), writing=True)
        content = args.get("content")
        if not isinstance(content, str):
            raise ws.ToolError("content must be a string")
        data = content.encode("utf-8")
        ws.write_bytes(self.sandbox, path, data)
        return f"wrote {len(data)} bytes to {path}"

    def _edit(self, args: dict[str, Any]) -> str:
        path = ws.clean_path(args.get("path"), writing=True)
        old, new = args.get("old_string"), args.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ws.ToolError("old_string and new_string must be strings")
        text = ws.read_text(self.sandbox, path)
        changed, count = ws.edit_text(text, old, new, bool(args.get("replace_all")))
        ws.write_bytes(self.sandbox, path, changed.encode("utf-8"))
        return f"replaced {count} occurrence{'s' if count > 1 else ''} in {path}"

    def _list_files(self, args: dict[str, Any]) -> str:
        path = ws.clean_path(args.get("path") or ".")
        depth = int(args.get("max_depth") or 3)
        names = ws.list_files(self.sandbox, path, depth)
        if not names:
            return f"[no files under {path} within depth {depth}]"
        more = len(names) > ws.MAX_LIST
        shown = "\n".join(names[: ws.MAX_LIST])
        return shown + ("\n[… more files; list a subdirectory]" if more else "")

    def _comment(self, args: dict[str, Any]) -> str:
        path = ws.clean_path(args.get("path"))
        line, body = int(args.get("line") or 0), args.get("body")
        if line < 1:
            raise ws.ToolError("line must be a 1-based line number")
        if not isinstance(body, str) or not body.strip():
            raise ws.ToolError("body is required")
        self.findings.append(Finding(path=path, line=line, body=body.strip()))
        return f"noted comment {len(self.findings)} on {path}:{line}"

    def _finish(self, args: dict[str, Any]) -> str:
        summary = args.get("summary")
        self.finished = summary.strip() if isinstance(summary, str) and summary.strip() else "done"
        return "finished"
