"""Protocol test of the `openai` agent: a local scripted chat-completions server (not a real
model) drives real tool calls in a real sandbox (Docker and bubblewrap), including a 429 with
Retry-After and a 500; the test asserts what the agent sent and what happened in the workspace.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path

import pytest

from app.core.kinds import Kind
from tasks.agent import AgentResult, AgentTask, Budget, Finding, Stop
from tasks.agent.openai_agent import OpenAIAgent
from tasks.agent.tools import READ_TOOLS, WRITE_TOOLS, ToolBox
from tasks.agent.workspace import exec_cancellable
from tasks.sandbox.base import Sandbox
from tests.doubles.chat import Call, ChatDouble, Reply, Status
from tests.doubles.sandboxes import StartFn

CALC = "def add(a, b):\n    return a - b\n"
FIX = AgentTask(Kind.FIX_CI, "CI fails on main", "```\nFAILED test_calc.py::test_add\n```")
REVIEW = AgentTask(Kind.REVIEW_PR, "Review #7", "Please review the change to calc.py.")
PROMPTS = Path(__file__).resolve().parents[2] / "tasks" / "agent" / "prompts"


def prompt(name: str) -> str:
    return (PROMPTS / f"{name}.md").read_text(encoding="utf-8").strip()


@pytest.fixture
def key() -> str:
    return "sk-test-" + uuid.uuid4().hex


@pytest.fixture
def box(start: StartFn) -> Sandbox:
    sandbox = start(files={"calc.py": CALC, "README.md": "# calc\n"})
    os.symlink("/etc", sandbox.workspace / "etc_link")
    return sandbox


def agent(double: ChatDouble, key: str) -> OpenAIAgent:
    return OpenAIAgent(double.base_url, "test-model", key, backoff_base=0.05)


def run(
    double: ChatDouble, key: str, sandbox: Sandbox, task: AgentTask, **budget: int
) -> AgentResult:
    return agent(double, key).run(sandbox, task, Budget(**budget), threading.Event())


def test_scripted_fix_with_429_and_500(box: Sandbox, key: str) -> None:
    script = [
        Status(429, {"Retry-After": "1"}, '{"error": {"message": "Rate limit reached"}}'),
        Reply([Call("list_files", {}, "c-list")], content="Looking around."),
        Status(500),
        Reply([Call("read_file", {"path": "calc.py"}, "c-read")]),
        Reply(
            [
                Call(
                    "edit",
                    {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"},
                    "c-edit",
                ),
                Call(
                    "write_file", {"path": "notes/CHANGES.md", "content": "fixed add\n"}, "c-write"
                ),
            ]
        ),
        Reply(
            [
                Call(
                    "run_command",
                    {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"},
                    "c-run",
                ),
                Call("run_command", {"command": "env; echo to-stderr >&2; exit 3"}, "c-env"),
            ]
        ),
        Reply([Call("finish", {"summary": "add() adds now"}, "c-finish")]),
    ]
    with ChatDouble(script) as double:
        result = agent(double, key).run(box, FIX, Budget(), threading.Event())

    assert result.stopped is Stop.FINISHED, result.transcript_tail
    assert result.summary == "add() adds now"
    assert result.ran and result.steps == 5 and result.tokens == 500
    assert (box.workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (box.workspace / "notes" / "CHANGES.md").read_text() == "fixed add\n"

    seen = double.requests
    assert len(seen) == 7  # 5 answered turns, the 429 and the 500 retried
    assert all(r.path == "/v1/chat/completions" for r in seen)
    assert all(r.headers["Authorization"] == f"Bearer {key}" for r in seen)
    assert all(key not in r.raw for r in seen)  # the key is never in a message or tool result
    assert all(r.body["model"] == "test-model" for r in seen)
    assert all(sorted(r.tool_names()) == sorted(WRITE_TOOLS) for r in seen)
    # a retried request is the same request
    assert seen[0].body == seen[1].body and seen[2].body == seen[3].body

    last = seen[-1].tool_results()
    assert set(last) == {"c-list", "c-read", "c-edit", "c-write", "c-run", "c-env"}
    assert "calc.py" in last["c-list"] and "README.md" in last["c-list"]
    assert last["c-read"] == CALC
    assert last["c-edit"] == "replaced 1 occurrence in calc.py"
    assert last["c-write"] == "wrote 10 bytes to notes/CHANGES.md"
    assert last["c-run"] == "exit code: 0\n5\n"
    assert last["c-env"].startswith("exit code: 3\n") and "to-stderr" in last["c-env"]
    assert "ONLOOP" not in last["c-env"] and key not in last["c-env"]
    messages = seen[-1].body["messages"]
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    # The standing instructions come from the prompt files (tasks/agent/prompts/).
    assert messages[0]["content"] == prompt("general")
    assert prompt("fix_ci") in messages[1]["content"]
    assert (
        "CI fails on main" in messages[1]["content"]
        and "FAILED test_calc.py" in messages[1]["content"]
    )
    calls = [m for m in messages if m["role"] == "assistant"]
    assert calls[0]["content"] == "Looking around."
    assert calls[0]["tool_calls"][0]["id"] == "c-list"
    assert "HTTP 429" in result.transcript_tail and "HTTP 500" in result.transcript_tail
    assert key not in result.transcript_tail


def test_step_budget_stops_the_run(box: Sandbox, key: str) -> None:
    with ChatDouble([Reply([Call("list_files", {})])], repeat_last=True) as double:
        result = run(double, key, box, FIX, max_steps=3)
    assert result.stopped is Stop.MAX_STEPS
    assert result.steps == 3
    assert len(double.requests) == 3


def test_token_budget_stops_the_run(box: Sandbox, key: str) -> None:
    with ChatDouble([Reply([Call("list_files", {})], tokens=1500)], repeat_last=True) as double:
        result = run(double, key, box, FIX, max_tokens=4000)
    assert result.stopped is Stop.MAX_TOKENS
    assert len(double.requests) == 3 and result.tokens == 4500
    # Input and output are kept apart for the budgets' cost (ONLOOP_MODEL_PRICES).
    assert (result.tokens_in, result.tokens_out) == (3375, 1125)


def test_retry_budget_is_per_job(box: Sandbox, key: str) -> None:
    with ChatDouble([Status(503)], repeat_last=True) as double:
        result = run(double, key, box, FIX, max_retries=2)
    assert result.stopped is Stop.ERROR
    assert "gave up after 2 retries (last: HTTP 503)" in result.summary
    assert len(double.requests) == 3


def test_client_errors_are_not_retried_and_the_key_is_masked(box: Sandbox, key: str) -> None:
    echo = f'{{"error": {{"message": "Incorrect API key provided: {key}"}}}}'
    with ChatDouble([Status(401, body=echo)]) as double:
        result = run(double, key, box, FIX)
    assert result.stopped is Stop.ERROR and len(double.requests) == 1
    assert "HTTP 401" in result.summary and "***" in result.summary
    assert key not in result.summary + result.transcript_tail


def test_review_gets_read_only_tools_and_a_write_is_refused(box: Sandbox, key: str) -> None:
    script = [
        Reply(
            [
                Call("write_file", {"path": "calc.py", "content": "gone\n"}, "w"),
                Call("run_command", {"command": "rm calc.py"}, "r"),
            ]
        ),
        Reply([Call("comment", {"path": "calc.py", "line": 2, "body": "This subtracts."}, "c")]),
        Reply([Call("finish", {"summary": "one problem"})]),
    ]
    with ChatDouble(script) as double:
        result = run(double, key, box, REVIEW)
    assert result.stopped is Stop.FINISHED
    assert all(sorted(r.tool_names()) == sorted(READ_TOOLS) for r in double.requests)
    results = double.requests[1].tool_results()
    assert results["w"] == "error: the tool 'write_file' is not available in a read-only job"
    assert results["r"].startswith("error: the tool 'run_command' is not available")
    assert (box.workspace / "calc.py").read_text() == CALC
    assert result.findings == [Finding("calc.py", 2, "This subtracts.")]


def test_prose_without_tool_calls_is_nudged_then_taken_as_the_end(box: Sandbox, key: str) -> None:
    with ChatDouble(
        [Reply(content="I think it is fine."), Reply(content="Done: nothing to change.")]
    ) as double:
        result = run(double, key, box, FIX)
    assert result.stopped is Stop.FINISHED
    assert result.summary == "Done: nothing to change."
    assert double.requests[1].body["messages"][-1]["role"] == "user"


def test_cancel_interrupts_a_running_command(box: Sandbox, key: str) -> None:
    cancel = threading.Event()
    script = [
        Reply([Call("run_command", {"command": "sleep 120"})]),
        Reply([Call("finish", {"summary": "x"})]),
    ]
    with ChatDouble(script) as double:
        timer = threading.Timer(1.0, cancel.set)
        timer.start()
        result = agent(double, key).run(box, FIX, Budget(), cancel)
        timer.cancel()
    assert result.stopped is Stop.CANCELLED
    assert len(double.requests) == 1


@pytest.mark.parametrize(
    ("name", "args", "refusal"),
    [
        ("read_file", {"path": "../x"}, "'..' is refused"),
        ("read_file", {"path": "/etc/passwd"}, "absolute paths are refused"),
        ("read_file", {"path": "/workspace/../etc/passwd"}, "'..' is refused"),
        ("read_file", {"path": "etc_link/passwd"}, "resolves outside /workspace"),
        ("list_files", {"path": "etc_link"}, "resolves outside /workspace"),
        ("write_file", {"path": "etc_link/evil", "content": "x"}, "resolves outside /workspace"),
        ("write_file", {"path": "etc_link", "content": "x"}, "resolves outside /workspace"),
        ("edit", {"path": "etc_link/hostname", "old_string": "a", "new_string": "b"}, "outside"),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, "inside .git"),
        ("read_file", {"path": "nope.txt"}, "no such file"),
        ("edit", {"path": "calc.py", "old_string": "zzz", "new_string": "b"}, "was not found"),
    ],
)
def test_paths_outside_the_workspace_are_refused(
    box: Sandbox, name: str, args: dict[str, object], refusal: str
) -> None:
    tools = ToolBox(box, FIX, threading.Event(), deadline=float("inf"))
    result = tools.call(name, json.dumps(args))
    assert result.startswith("error: ") and refusal in result, result
    assert not Path("/etc/evil").exists()
    assert box.exec(["test", "-e", "/etc/evil"]).exit_code != 0
    assert (box.workspace / "calc.py").read_text() == CALC


def test_workspace_prefixed_paths_and_line_ranges(box: Sandbox) -> None:
    tools = ToolBox(box, FIX, threading.Event(), deadline=float("inf"))
    assert tools.call("read_file", '{"path": "/workspace/calc.py"}') == CALC
    ranged = tools.call("read_file", '{"path": "calc.py", "start_line": 2, "end_line": 2}')
    assert ranged == "[calc.py: lines 2-2 of 2]\n    return a - b\n"
    big = "".join(f"line {i}\n" for i in range(20000))
    assert tools.call("write_file", json.dumps({"path": "deep/er/big.txt", "content": big}))
    assert (box.workspace / "deep" / "er" / "big.txt").read_text() == big  # several chunks
    assert tools.call("read_file", "{not json").startswith(
        "error: the arguments are not valid JSON"
    )


def test_a_cancel_after_the_command_ended_interrupts_nothing(box: Sandbox) -> None:
    """The watcher outlives `exec_cancellable` by up to a slice (nobody waits for it), but a
    cancel that comes after the command ended leaves the sandbox's next command alone."""
    cancel = threading.Event()
    assert exec_cancellable(box, "true", timeout=30, cancel=cancel).ok
    cancel.set()  # the watcher, still in its slice, sees it now
    after = box.exec("sleep 1; echo still here", timeout=30)
    assert after.ok and after.stdout.strip() == "still here", after
