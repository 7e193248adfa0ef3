"""The `openai` agent: a tool-calling loop against any OpenAI-compatible chat-completions API."""

from __future__ import annotations

import email.utils
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from tasks.agent.base import (
    GENERAL,
    AgentResult,
    AgentTask,
    Budget,
    Stop,
    Transcript,
    task_markdown,
)
from tasks.agent.tools import ToolBox, tool_specs
from tasks.sandbox.base import Sandbox

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
NUDGE = "Continue with the tools. When the task is done, call `finish` with a summary."


class Halt(Exception):
    """The run ends: `stopped` says why (AgentResult.stopped), the message is its summary."""

    def __init__(self, stopped: Stop, summary: str) -> None:
        super().__init__(summary)
        self.stopped = stopped
        self.summary = summary


def retry_after(response: requests.Response | None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, or `Retry-After` in seconds or
    as an HTTP date (https://www.rfc-editor.org/rfc/rfc9110#field.retry-after)."""
    if response is None:
        return None
    millis = response.headers.get("retry-after-ms")
    value = response.headers.get("Retry-After")
    try:
        if millis:
            return max(0.0, float(millis) / 1000)
        if value:
            return max(0.0, float(value))
    except ValueError:
        pass
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


@dataclass
class _Run:
    task: AgentTask
    budget: Budget
    cancel: threading.Event
    deadline: float
    transcript: Transcript
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    retries: int = 0


class OpenAIAgent:
    """Asks the model for the next tool calls, runs them in the sandbox, feeds results back.

    The API key is only ever sent in the Authorization header of requests from the worker.
    `backoff_base` is the first wait (seconds) after a 429/5xx without Retry-After; it doubles.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        *,
        backoff_base: float = 2.0,
        max_backoff: float = 60.0,
        request_timeout: float = 300.0,
        session: requests.Session | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._key = api_key
        self.backoff_base = backoff_base
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.session = session or requests.Session()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIAgent(url={self.url!r}, model={self.model!r})"

    def run(
        self, sandbox: Sandbox, task: AgentTask, budget: Budget, cancel: threading.Event
    ) -> AgentResult:
        """Work on `task` until the model calls finish or a limit of `budget` is reached."""
        deadline = min(time.monotonic() + budget.wall_seconds, time.monotonic() + sandbox.remaining)
        run = _Run(task, budget, cancel, deadline, Transcript((self._key,)))
        run.messages = [
            {"role": "system", "content": GENERAL},
            {"role": "user", "content": task_markdown(task)},
        ]
        tools = ToolBox(sandbox, task, cancel, deadline)
        try:
            summary = self._loop(run, tools)
            stopped = Stop.FINISHED
        except Halt as halt:
            stopped, summary = halt.stopped, halt.summary
            run.transcript.add(f"stopped ({stopped}): {summary}")
        except Exception as exc:  # a bug or a sandbox failure: the job decides what to do
            log.warning("agent run failed", exc_info=True)
            stopped, summary = Stop.ERROR, f"the agent failed: {type(exc).__name__}: {exc}"
            run.transcript.add(summary)
        return AgentResult(
            ran=True,
            summary=run.transcript.redact(summary),
            steps=run.steps,
            tokens=run.tokens,
            stopped=stopped,
            transcript_tail=run.transcript.tail(),
            findings=list(tools.findings),
            tokens_in=run.tokens_in,
            tokens_out=run.tokens_out,
            model=self.model,
        )

    def _loop(self, run: _Run, tools: ToolBox) -> str:
        specs = tool_specs(run.task)
        nudged = False
        while True:
            self._check(run)
            reply = self._complete(run, specs)
            run.steps += 1
            run.tokens += _tokens(reply.get("usage"))
            run.tokens_in += _count(reply.get("usage"), "prompt_tokens")
            run.tokens_out += _count(reply.get("usage"), "completion_tokens")
            message = _message(reply)
            content = message.get("content") or ""
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                raise Halt(Stop.ERROR, "the model endpoint sent tool_calls that are not a list")
            if content:
                run.transcript.add(f"model: {content}")
            assistant: dict[str, Any] = {"role": "assistant", "content": content or None}
            if calls:
                assistant["tool_calls"] = calls
            run.messages.append(assistant)
            if not calls:
                if nudged:  # it answered in prose twice: take that as its last word
                    return str(content) or "the model stopped without calling finish"
                nudged = True
                run.messages.append({"role": "user", "content": NUDGE})
                continue
            nudged = False
            for call in calls:
                if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                    raise Halt(Stop.ERROR, "the model endpoint sent a malformed tool call")
                function = call["function"]
                name, arguments = str(function.get("name")), str(function.get("arguments") or "")
                result = tools.call(name, arguments)
                run.transcript.add(f"{name} {arguments} -> {result}", max_chars=400)
                if tools.finished is not None:
                    return tools.finished
                run.messages.append(
                    {"role": "tool", "tool_call_id": call.get("id", ""), "content": result}
                )
                if run.cancel.is_set():
                    raise Halt(Stop.CANCELLED, "the job was cancelled")

    def _check(self, run: _Run) -> None:
        if run.cancel.is_set():
            raise Halt(Stop.CANCELLED, "the job was cancelled")
        if run.steps >= run.budget.max_steps:
            raise Halt(Stop.MAX_STEPS, f"stopped after {run.steps} model turns (the step budget)")
        if run.tokens >= run.budget.max_tokens:
            raise Halt(Stop.MAX_TOKENS, f"stopped after {run.tokens} tokens (the token budget)")
        if time.monotonic() >= run.deadline:
            raise Halt(Stop.WALL_TIME, "stopped at the time budget")

    def _complete(self, run: _Run, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat completion; 429/5xx and connection errors are retried within the job's
        retry budget, after Retry-After when the server gives one, else with backoff."""
        body = {"model": self.model, "messages": run.messages, "tools": specs}
        headers = {"Authorization": f"Bearer {self._key}", "Content-Type": "application/json"}
        while True:
            remaining = run.deadline - time.monotonic()
            if remaining <= 0:
                raise Halt(Stop.WALL_TIME, "stopped at the time budget")
            response: requests.Response | None = None
            try:
                response = self.session.post(
                    self.url,
                    data=json.dumps(body),
                    headers=headers,
                    timeout=(10, max(1.0, min(self.request_timeout, remaining))),
                )
            except requests.RequestException as exc:
                problem = f"{type(exc).__name__}"
            else:
                if response.status_code == 200:
                    return _json(response)
                problem = f"HTTP {response.status_code}"
                if response.status_code not in RETRY_STATUSES:
                    text = run.transcript.redact(response.text[:300])
                    raise Halt(Stop.ERROR, f"the model endpoint answered {problem}: {text}")
            if run.retries >= run.budget.max_retries:
                raise Halt(Stop.ERROR, f"gave up after {run.retries} retries (last: {problem})")
            wait = retry_after(response)
            if wait is None:
                wait = min(self.max_backoff, self.backoff_base * 2**run.retries)
            if time.monotonic() + wait >= run.deadline:
                raise Halt(
                    Stop.WALL_TIME, f"{problem}: retrying in {wait:g}s would pass the budget"
                )
            run.retries += 1
            run.transcript.add(f"{problem}; retry {run.retries} in {wait:g}s")
            if run.cancel.wait(wait):
                raise Halt(Stop.CANCELLED, "the job was cancelled")


def _tokens(usage: object) -> int:
    """Tokens a turn used: `total_tokens`, else prompt + completion (0 when not reported)."""
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and total > 0:
        return total
    parts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    return sum(p for p in parts if isinstance(p, int) and p > 0)


def _count(usage: object, name: str) -> int:
    """One count of a turn's `usage` (0 when not reported)."""
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and value > 0 else 0


def _json(response: requests.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as exc:
        raise Halt(
            Stop.ERROR, "the model endpoint answered with something that is not JSON"
        ) from exc
    if not isinstance(data, dict):
        raise Halt(Stop.ERROR, "the model endpoint's answer is not a JSON object")
    return data


def _message(reply: dict[str, Any]) -> dict[str, Any]:
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Halt(Stop.ERROR, "the model endpoint's answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise Halt(Stop.ERROR, "the model endpoint's answer has no message")
    return message
