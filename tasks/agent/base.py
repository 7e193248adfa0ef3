"""The agent harness interface: a task, its budget, the result and why the agent stopped."""

from __future__ import annotations

import importlib.resources
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from app.core.kinds import Kind
from app.core.markdown import fence_for, fenced
from tasks.sandbox.base import Sandbox

# The kinds an agent works on, each with its instructions in prompts/<kind>.md.
AGENT_KINDS = (
    Kind.FIX_ISSUE,
    Kind.FIX_CI,
    Kind.REBASE_PR,
    Kind.REVIEW_PR,
    Kind.ADDRESS_REVIEW,
    Kind.CAMPAIGN_CHANGE,
)
READ_ONLY_KINDS = frozenset({Kind.REVIEW_PR})


class Stop(StrEnum):
    """Why an agent run ended: only FINISHED means the agent said it was done."""

    FINISHED = "finished"
    MAX_STEPS = "max_steps"  # the step budget (model turns)
    WALL_TIME = "wall_time"  # the time budget, or the sandbox's deadline
    MAX_TOKENS = "max_tokens"  # the token budget
    ERROR = "error"  # the endpoint, the command or the sandbox failed
    CANCELLED = "cancelled"  # the job was cancelled


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
class Quoted:
    """Text onloop did not write (an issue, a pull request's description or diff, a comment, a
    CI log): the agent gets it as quoted data under a fixed instruction, never as instructions.
    `source` is onloop's own words for what it is; `text` is never read as Markdown."""

    source: str  # e.g. "the issue's title and body, as they read when it was labelled"
    text: str
    info: str = "text"  # the fence's info string: text, diff, markdown


@dataclass(frozen=True)
class AgentTask:
    """What the agent is asked to do. `title` and `body` are onloop's own words (Markdown);
    everything a person or a repository wrote goes in `quoted`."""

    kind: Kind  # one of AGENT_KINDS
    title: str
    body: str
    read_only: bool = False  # only read_file, list_files, comment, finish
    quoted: tuple[Quoted, ...] = ()

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
    """What an agent run did, and why it stopped."""

    ran: bool  # False when no agent is configured
    summary: str  # the agent's finish message, or why it stopped
    steps: int = 0
    tokens: int = 0
    stopped: Stop = Stop.FINISHED
    transcript_tail: str = ""  # the last few KB of what happened (no secrets)
    findings: list[Finding] = field(default_factory=list)
    tokens_in: int = 0  # prompt tokens, as reported (for the budgets' cost)
    tokens_out: int = 0  # completion tokens
    model: str = ""  # what ONLOOP_MODEL_PRICES prices it by

    @property
    def finished(self) -> bool:
        """True when the agent said it was done (not stopped by a limit or an error)."""
        return self.stopped is Stop.FINISHED


class Agent(Protocol):
    """Anything that works on a task inside a sandbox within a budget."""

    name: str

    def run(
        self, sandbox: Sandbox, task: AgentTask, budget: Budget, cancel: threading.Event
    ) -> AgentResult: ...


# What the agent is told: GENERAL first (the system message), then the instructions for the
# task's kind before the task's own title and body, then the quoted text, each block under
# QUOTED. Markdown files in prompts/, read once.
_PROMPTS = importlib.resources.files("tasks.agent") / "prompts"


def _prompt(name: str) -> str:
    return (_PROMPTS / f"{name}.md").read_text(encoding="utf-8").strip()


GENERAL = _prompt("general")
INSTRUCTIONS: Mapping[Kind, str] = MappingProxyType({kind: _prompt(kind) for kind in AGENT_KINDS})
QUOTED = _prompt("quoted")  # `{source}` and `{length}` are filled in for each block


def instructions(task: AgentTask) -> str:
    """The standing instructions for `task`'s kind."""
    return INSTRUCTIONS.get(task.kind, "Do the task described below.")


def quote(block: Quoted) -> str:
    """One block of someone else's text: the fixed instruction, then the text in a fence
    longer than any run of backticks in it, so nothing in it can close the block early."""
    length = str(len(fence_for(block.text)))
    told = QUOTED.replace("{source}", block.source).replace("{length}", length)
    return f"{told}\n\n{fenced(block.text.rstrip(chr(10)), block.info)}"


def task_markdown(task: AgentTask) -> str:
    """The task as one Markdown document (TASK.md for a command agent, the first message)."""
    parts = [f"# {task.title}", instructions(task), task.body.rstrip()]
    parts += [quote(block) for block in task.quoted]
    return "\n\n".join(part for part in parts if part) + "\n"


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
