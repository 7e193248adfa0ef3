"""The `command` agent in a real sandbox (Docker and bubblewrap): it reads TASK.md, edits the
workspace, and leaves no TASK.md behind; no ONLOOP_* variable or token reaches it."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from app.core.kinds import Kind
from app.core.settings import Settings
from tasks.agent import AgentConfigError, AgentTask, Budget, Stop, get_agent
from tasks.agent.command_agent import CommandAgent
from tasks.agent.openai_agent import OpenAIAgent
from tasks.sandbox.base import Sandbox
from tests.doubles.sandboxes import StartFn

TASK = AgentTask(Kind.FIX_ISSUE, "Greeting is wrong", "Set the greeting to: hello from the task\n")
# A stand-in for a command-line agent: it takes its instructions from TASK.md.
EDITOR = (
    'sed -n "s/^Set the greeting to: //p" TASK.md > greeting.txt && env > env.txt '
    "&& git status --porcelain > status.txt && echo edited greeting.txt"
)


def git_repo(box: Sandbox) -> None:
    made = box.exec(
        "git init -q && git add -A && git -c user.name=t -c user.email=t@e commit -qm i"
    )
    assert made.ok, made.output


def test_edits_from_task_md_and_cleans_up(start: StartFn, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghs_" + uuid.uuid4().hex
    monkeypatch.setenv("ONLOOP_AGENT_API_KEY", secret)  # in the worker: must not reach the box
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    box = start(files={"greeting.txt": "hi\n"})
    git_repo(box)
    result = CommandAgent(EDITOR).run(box, TASK, Budget(), threading.Event())

    assert result.ran and result.stopped is Stop.FINISHED, result.transcript_tail
    assert result.summary == "edited greeting.txt"
    assert (box.workspace / "greeting.txt").read_text() == "hello from the task\n"
    assert not (box.workspace / "TASK.md").exists()
    status = (box.workspace / "status.txt").read_text().split()
    assert "TASK.md" not in status and "greeting.txt" in status  # excluded while it was there
    env = (box.workspace / "env.txt").read_text()
    assert "TASK_FILE=/workspace/TASK.md" in env
    assert "ONLOOP" not in env and secret not in env and "TOKEN" not in env


def test_a_repository_task_md_is_put_back(start: StartFn) -> None:
    box = start(files={"TASK.md": "the project's own task list\n"})
    result = CommandAgent("grep -c 'Greeting is wrong' TASK.md").run(
        box, TASK, Budget(), threading.Event()
    )
    assert result.stopped is Stop.FINISHED and result.summary == "1"
    assert (box.workspace / "TASK.md").read_text() == "the project's own task list\n"


def test_a_task_md_that_cannot_be_written_is_an_error_that_says_so(start: StartFn) -> None:
    """A repository's own TASK.md directory: the command does not run, and the job is told
    why (an agent error, not an internal one)."""
    box = start()
    assert box.exec('mkdir TASK.md && echo "the project\'s" > TASK.md/notes.txt').ok
    result = CommandAgent("touch ran.txt").run(box, TASK, Budget(), threading.Event())
    assert result.stopped is Stop.ERROR, result
    assert "did not run: TASK.md could not be written" in result.summary
    assert not (box.workspace / "ran.txt").exists()
    assert (box.workspace / "TASK.md" / "notes.txt").read_text() == "the project's\n"


def test_failing_command_is_an_error_with_its_output(start: StartFn) -> None:
    box = start()
    script = "for i in $(seq 1 5000); do echo line $i; done; echo broke >&2; exit 7"
    result = CommandAgent(script).run(box, TASK, Budget(), threading.Event())
    assert result.stopped is Stop.ERROR and "code 7" in result.summary
    assert result.transcript_tail.rstrip().endswith("broke")
    assert "line 1\n" not in result.transcript_tail  # only the tail is kept
    assert not (box.workspace / "TASK.md").exists()


def test_time_budget_and_cancel(start: StartFn) -> None:
    box = start()
    timed = CommandAgent("sleep 60").run(box, TASK, Budget(wall_seconds=1), threading.Event())
    assert timed.stopped is Stop.WALL_TIME
    assert not (box.workspace / "TASK.md").exists()

    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    cancelled = CommandAgent("sleep 60").run(start(), TASK, Budget(), cancel)
    timer.cancel()
    assert cancelled.stopped is Stop.CANCELLED


def test_get_agent_follows_the_settings(tmp_path: Path) -> None:
    assert get_agent(Settings(agent="none")) is None
    with pytest.raises(AgentConfigError, match="ONLOOP_AGENT_COMMAND"):
        get_agent(Settings(agent="command"))
    with pytest.raises(AgentConfigError, match="ONLOOP_AGENT_API_KEY"):
        get_agent(Settings(agent="openai"))
    command = get_agent(Settings(agent="command", agent_command="aider --yes"))
    assert isinstance(command, CommandAgent) and command.command == "aider --yes"
    key = "sk-" + uuid.uuid4().hex
    openai = get_agent(Settings(agent="openai", agent_api_key=key, agent_base_url="http://h/v1/"))
    assert isinstance(openai, OpenAIAgent) and openai.url == "http://h/v1/chat/completions"
    assert key not in repr(openai)


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"agent": "command"}, "FAIL agent: ONLOOP_AGENT=command needs ONLOOP_AGENT_COMMAND"),
        ({"agent": "openai", "agent_model": ""}, "needs ONLOOP_AGENT_MODEL"),
        ({"agent": "openai"}, "needs ONLOOP_AGENT_API_KEY"),
        ({"agent": "openai", "agent_api_key": "k"}, "ok   agent: openai: model gpt-4o-mini"),
        ({"agent": "none"}, "ok   agent: none"),
    ],
)
def test_doctor_names_what_the_agent_lacks(
    settings: dict[str, object], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli.doctor import run_doctor

    run_doctor(
        Settings(
            database_url=f"sqlite:///{tmp_path}/none.db",
            sandbox_backend="local",
            **settings,  # type: ignore[arg-type]
        )
    )
    agent_lines = [x for x in capsys.readouterr().out.splitlines() if " agent: " in x]
    assert len(agent_lines) == 1 and line in agent_lines[0], agent_lines


def test_the_agent_takes_one_sandbox_command_and_reads_its_usage(start: StartFn) -> None:
    """Its bookkeeping runs in the shell that runs it: one sandbox command in all; the usage
    file it wrote is read and removed, a repository's TASK.md put back."""
    box = start(files={"TASK.md": "ours\n"})
    ran: list[list[str]] = []
    box.observers.append(lambda argv, _result: ran.append(argv))
    report = '{"input_tokens": 12, "output_tokens": 30, "model": "m1"}'
    result = CommandAgent(f"grep -q Greeting TASK.md && echo '{report}' > \"$USAGE_FILE\"").run(
        box, TASK, Budget(), threading.Event()
    )
    assert result.stopped is Stop.FINISHED, result.transcript_tail
    assert (result.tokens_in, result.tokens_out, result.model) == (12, 30, "m1")
    assert len(ran) == 1
    assert (box.workspace / "TASK.md").read_text() == "ours\n"
    assert not (box.workspace / ".onloop-usage.json").exists()
    assert "placed" not in result.transcript_tail  # the bookkeeping is not the agent's output


@pytest.mark.parametrize("ours", ["the project's own tasks\n", ""])
def test_a_killed_agent_still_leaves_the_repository_s_task_md_as_it_was(
    start: StartFn, ours: str
) -> None:
    """Out of time, the shell that would have put TASK.md back is killed with the command; a
    second command does it, from what the first said TASK.md held (an empty file too)."""
    box = start(files={"TASK.md": ours})
    ran: list[list[str]] = []
    box.observers.append(lambda argv, _result: ran.append(argv))
    result = CommandAgent('echo x > "$USAGE_FILE"; sleep 60').run(
        box, TASK, Budget(wall_seconds=1), threading.Event()
    )
    assert result.stopped is Stop.WALL_TIME
    assert (box.workspace / "TASK.md").read_text() == ours
    assert len(ran) == 2 and not (box.workspace / ".onloop-usage.json").exists()
