"""The agent harness: `get_agent(settings)` gives the agent ONLOOP_AGENT names, or None."""

from __future__ import annotations

from tasks.agent.base import (
    Agent,
    AgentConfigError,
    AgentResult,
    AgentTask,
    Budget,
    Finding,
    Quoted,
    Stop,
    task_markdown,
)
from tasks.agent.factory import budget_from, config_problems, get_agent

__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentResult",
    "AgentTask",
    "Budget",
    "Finding",
    "Quoted",
    "Stop",
    "budget_from",
    "config_problems",
    "get_agent",
    "task_markdown",
]
