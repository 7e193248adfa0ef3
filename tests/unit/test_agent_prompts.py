"""The agent's standing instructions are the Markdown files in tasks/agent/prompts/: one per
kind an agent works on, plus the general one, each read and used."""

from __future__ import annotations

from pathlib import Path

from tasks.agent.base import AGENT_KINDS, GENERAL, AgentTask, task_markdown

PROMPTS = Path(__file__).resolve().parents[2] / "tasks" / "agent" / "prompts"


def text(name: str) -> str:
    return (PROMPTS / f"{name}.md").read_text(encoding="utf-8").strip()


def test_each_agent_kind_is_told_its_own_file() -> None:
    told = {kind: task_markdown(AgentTask(kind, "Title", "The body.")) for kind in AGENT_KINDS}
    for kind, markdown in told.items():
        assert markdown == f"# Title\n\n{text(kind)}\n\nThe body.\n"
    assert len({text(kind) for kind in AGENT_KINDS}) == len(AGENT_KINDS)


def test_the_general_prompt_is_its_file_and_every_file_is_used() -> None:
    assert GENERAL == text("general") and GENERAL.startswith("You work in a checkout")
    assert {p.stem for p in PROMPTS.glob("*.md")} == {"general", "quoted", *AGENT_KINDS}
