"""The parts of a job's page read from its result and audit: the sandbox commands with their
exit codes, the checks, the agent's spend against its budget, egress refusals, and the diff
that was pushed or refused. Data only; the template escapes every string."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.settings import Settings
from app.store.models import Job

MAX_COMMANDS = 300


@dataclass(frozen=True)
class Command:
    line: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Agent:
    tokens_in: int
    tokens_out: int
    budget: int  # tokens one agent step may use (ONLOOP_AGENT_MAX_TOKENS)
    cost_usd: float
    sandbox_minutes: float

    @property
    def used(self) -> int:
        return self.tokens_in + self.tokens_out


@dataclass(frozen=True)
class Details:
    commands: list[Command] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    checks: list[Command] = field(default_factory=list)
    agent: Agent | None = None
    egress: list[str] = field(default_factory=list)
    diff: str = ""
    pushed: bool = False
    violations: list[str] = field(default_factory=list)


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _commands(entries: Sequence[Mapping[str, Any]]) -> list[Command]:
    found = []
    for detail in entries[:MAX_COMMANDS]:
        argv, code = detail.get("argv"), detail.get("exit_code")
        if isinstance(argv, list) and isinstance(code, int):
            found.append(Command(shlex.join(str(a) for a in argv), code))
    return found


def details(settings: Settings, job: Job, exec_details: Sequence[Mapping[str, Any]]) -> Details:
    """What the page shows of `job` beyond its steps; `exec_details` are its `sandbox.exec`
    audit entries' details, oldest first."""
    result: Mapping[str, Any] = job.result if isinstance(job.result, dict) else {}
    checks = result.get("checks")
    ran = [
        Command(str(cmd), code)
        for cmd, code in (checks.items() if isinstance(checks, dict) else ())
        if isinstance(code, int)
    ]
    used = (job.agent_tokens_in or 0) + (job.agent_tokens_out or 0)
    agent = None
    if used or any(s.get("name") == "agent" for s in job.steps or [] if isinstance(s, dict)):
        agent = Agent(
            job.agent_tokens_in or 0,
            job.agent_tokens_out or 0,
            settings.agent_max_tokens,
            float(job.cost_usd or 0.0),
            round(float(job.sandbox_seconds or 0.0) / 60, 1),
        )
    egress = _strings(result.get("refused")) + [
        note for note in _strings(result.get("notes")) if "reach" in note or "egress" in note
    ]
    diff = result.get("diff")
    return Details(
        commands=_commands(exec_details),
        fixes=_strings(result.get("fixes")),
        checks=ran,
        agent=agent,
        egress=egress,
        diff=diff if isinstance(diff, str) else "",
        pushed=result.get("outcome") in ("pushed", "pr", "merged"),
        violations=_strings(result.get("violations")),
    )
