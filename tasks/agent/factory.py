"""`get_agent(settings)`: the agent ONLOOP_AGENT names, its settings checked; its budget."""

from __future__ import annotations

from app.core.settings import Settings
from tasks.agent.base import Agent, AgentConfigError, Budget
from tasks.agent.command_agent import CommandAgent
from tasks.agent.openai_agent import OpenAIAgent


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
        assert settings.agent_api_key is not None
        return OpenAIAgent(
            settings.agent_base_url,
            settings.agent_model,
            settings.agent_api_key.get_secret_value(),
        )
    if settings.agent == "command":
        return CommandAgent(settings.agent_command or "")
    raise AgentConfigError(f"unknown ONLOOP_AGENT {settings.agent!r}")
