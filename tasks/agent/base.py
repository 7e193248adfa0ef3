"""The agent harness interface: a task, its budget, the result, and `get_agent(settings)`."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.core.settings import Settings
    from tasks.sandbox.base import Sandbox

READ_ONLY_KINDS = frozenset({"review_pr"})
STOPPED = ("finished", "max_steps", "wall_time", "max_tokens", "error", "cancelled")


class AgentConfigError(ValueError):
    """ONLOOP_AGENT names an agent whose settings are incomplete; the message says which."""


@dataclass(frozen=True)
class Budget:
    """What one agentic step may spend."""

    max_steps: int = 30  # model turns
    wall_seconds: float = 900.0
    max_tokens: int = 200_000  # prompt+completion tokens summed from `usage`
    max_retries: int = 5  # 429/5xx retries per job


@dataclass(frozen=True)
class AgentTask:
    """What the agent is asked to do. `body` is Markdown (issue text, CI excerpt, conflicts)."""

    kind: str  # "fix_issue" | "fix_ci" | "rebase" | "review_pr"
    title: str
    body: str
    read_only: bool = False  # only read_file, list_files, comment, finish

    @property
    def is_read_only(self) -> bool:
        """Read-only by flag or by kind (a review never writes)."""
        return self.read_only or self.kind in READ_ONLY_KINDS


@dataclass
class Finding:
    """What a read-only (review) agent reports through its `comment` tool."""

    path: str
    line: int
    body: str


@dataclass
class AgentResult:
    """What an agent run did. `stopped` is one of STOPPED."""

    ran: bool  # False when no agent is configured
    summary: str  # the agent's finish message, or why it stopped
    steps: int = 0
    tokens: int = 0
    stopped: str = "finished"
    transcript_tail: str = ""  # the last few KB of what happened (no secrets)
    findings: list[Finding] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """True when the agent said it was done (not stopped by a limit or an error)."""
        return self.stopped == "finished"


class Agent(Protocol):
    """Anything that works on a task inside a sandbox within a budget."""

    name: str

    def run(
        self, sandbox: Sandbox, task: AgentTask, budget: Budget, cancel: threading.Event
    ) -> AgentResult: ...


# What the agent is told for each kind of job, before the task's own title and body.
INSTRUCTIONS: dict[str, str] = {
    "fix_issue": "Fix the issue described below. Add or update tests where that is practical.",
    "fix_ci": (
        "The pull request's CI checks fail; the failing step's output is below. Make them "
        "pass by fixing the code (not by deleting or skipping tests, and not by weakening "
        "the linters' configuration). Reproduce the failure with a command where you can."
    ),
    "rebase": (
        "A rebase stopped on conflicts in the files listed below. Resolve them: edit each "
        "file so that no conflict markers remain and the intent of both sides is kept. "
        "Do not run git commands that change history; onloop continues the rebase."
    ),
    "review_pr": (
        "Review the pull request described below. You can only read. Report each real "
        "problem with `comment` (path, line in the new version of the file, and what is "
        "wrong; put a replacement in a ```suggestion block where you have one). Then call "
        "`finish` with an overall summary. Do not comment on style a linter would catch."
    ),
}
GENERAL = (
    "You work in a checkout of a git repository at /workspace, inside a sandbox without "
    "network access. Paths are relative to /workspace. Keep changes small and focused on "
    "the task. Do not commit, push or switch branches: onloop commits your changes after "
    "you finish."
)


def instructions(task: AgentTask) -> str:
    """The standing instructions for `task`'s kind."""
    return INSTRUCTIONS.get(task.kind, "Do the task described below.")


def task_markdown(task: AgentTask) -> str:
    """The task as one Markdown document (TASK.md for a command agent, the first message)."""
    return f"# {task.title}\n\n{instructions(task)}\n\n{task.body.rstrip()}\n"


class Transcript:
    """A bounded log of what happened in a run; `secrets` are masked in everything it keeps."""

    def __init__(self, secrets: tuple[str, ...] = (), limit: int = 6000) -> None:
        self.secrets = tuple(s for s in secrets if s)
        self.limit = limit
        self.entries: deque[str] = deque()
        self.size = 0

    def redact(self, text: str) -> str:
        """`text` with every secret replaced by ***."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def add(self, text: str, max_chars: int = 800, *, tail: bool = False) -> None:
        """Keep one entry, clipped to `max_chars` (its start, or with `tail` its end); the
        oldest entries go when over the limit."""
        text = self.redact(text)
        if len(text) > max_chars:
            cut = f"[… cut from {len(text)} chars …]"
            keep = max(0, max_chars - len(cut) - 1)
            if tail:
                text = cut + "\n" + text[len(text) - keep :]
            else:
                text = text[:keep] + " " + cut
        self.entries.append(text)
        self.size += len(text) + 1
        while self.size > self.limit and len(self.entries) > 1:
            self.size -= len(self.entries.popleft()) + 1

    def tail(self) -> str:
        """The kept entries, one per line, at most `limit` characters."""
        return "\n".join(self.entries)[-self.limit :]


def budget_from(settings: Settings) -> Budget:
    """The per-job budget from ONLOOP_AGENT_MAX_STEPS, _WALL_SECONDS and _MAX_TOKENS."""
    return Budget(
        max_steps=settings.agent_max_steps,
        wall_seconds=float(settings.agent_wall_seconds),
        max_tokens=settings.agent_max_tokens,
    )


def config_problems(settings: Settings) -> list[str]:
    """What is missing for the configured ONLOOP_AGENT, each naming the variable to set."""
    if settings.agent == "openai":
        problems = []
        if not settings.agent_model:
            problems.append("ONLOOP_AGENT=openai needs ONLOOP_AGENT_MODEL")
        if settings.agent_api_key is None or not settings.agent_api_key.get_secret_value():
            problems.append(
                "ONLOOP_AGENT=openai needs ONLOOP_AGENT_API_KEY "
                "(any value for an endpoint that needs none)"
            )
        if not settings.agent_base_url.startswith(("http://", "https://")):
            problems.append("ONLOOP_AGENT_BASE_URL must be an http(s) URL")
        return problems
    if settings.agent == "command" and not (settings.agent_command or "").strip():
        return ["ONLOOP_AGENT=command needs ONLOOP_AGENT_COMMAND"]
    return []


def get_agent(settings: Settings) -> Agent | None:
    """The agent ONLOOP_AGENT names; None for `none`. AgentConfigError when incomplete."""
    if settings.agent == "none":
        return None
    problems = config_problems(settings)
    if problems:
        raise AgentConfigError("; ".join(problems))
    if settings.agent == "openai":
        from tasks.agent.openai_agent import OpenAIAgent

        assert settings.agent_api_key is not None
        return OpenAIAgent(
            settings.agent_base_url,
            settings.agent_model,
            settings.agent_api_key.get_secret_value(),
        )
    if settings.agent == "command":
        from tasks.agent.command_agent import CommandAgent

        return CommandAgent(settings.agent_command or "")
    raise AgentConfigError(f"unknown ONLOOP_AGENT {settings.agent!r}")
