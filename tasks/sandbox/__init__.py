"""Job sandboxes: one interface (start, exec, stop) with a Docker and a bubblewrap backend."""

from __future__ import annotations

from tasks.sandbox.base import ExecResult, Limits, Sandbox, SandboxBackend, SandboxError

__all__ = ["ExecResult", "Limits", "Sandbox", "SandboxBackend", "SandboxError"]
