"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 for agent protocol tests.

Each POST /v1/chat/completions gets the next scripted answer: a tool-call reply, a plain
text reply, or an HTTP error (429 with Retry-After, 500...). Every request is recorded with
its headers and JSON body so tests assert what the agent sent.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.doubles.http_handler import NoDelayHandler


@dataclass
class Call:
    """One tool call the model makes."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


@dataclass
class Reply:
    """A 200 answer: tool calls and/or text, with a usage block."""

    calls: list[Call] = field(default_factory=list)
    content: str | None = None
    tokens: int = 100


@dataclass
class Status:
    """An error answer."""

    code: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = '{"error": {"message": "try again", "type": "server_error"}}'


Answer = Reply | Status
Script = list[Answer | Callable[[dict[str, Any]], Answer]]


@dataclass
class Seen:
    """One request the double received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: str

    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.body.get("tools", [])]

    def tool_results(self) -> dict[str, str]:
        """tool_call_id -> content of every tool message in this request."""
        return {
            m["tool_call_id"]: m["content"]
            for m in self.body.get("messages", [])
            if m.get("role") == "tool"
        }


class ChatDouble:
    """Serves `script` in order; with `repeat_last`, the last answer forever."""

    def __init__(self, script: Script, *, repeat_last: bool = False) -> None:
        self.script = list(script)
        self.repeat_last = repeat_last
        self.requests: list[Seen] = []
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ChatDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_answer(self, body: dict[str, Any]) -> Answer:
        with self.lock:
            if not self.script:
                return Status(500, body='{"error": {"message": "the test script is exhausted"}}')
            last = self.repeat_last and len(self.script) == 1
            item = self.script[0] if last else self.script.pop(0)
        return item(body) if callable(item) else item

    def render(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{next(self.ids)}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in reply.calls
            ]
        prompt = reply.tokens * 3 // 4
        return {
            "id": f"chatcmpl-{next(self.ids)}",
            "object": "chat.completion",
            "created": 1715678400,
            "model": "test-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": reply.tokens - prompt,
                "total_tokens": reply.tokens,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        double = self

        class Handler(NoDelayHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                body = json.loads(raw)
                with double.lock:
                    double.requests.append(Seen(self.path, dict(self.headers), body, raw))
                if self.path != "/v1/chat/completions":
                    self._send(404, {}, '{"error": {"message": "no such route"}}')
                    return
                answer = double.next_answer(body)
                if isinstance(answer, Status):
                    self._send(answer.code, answer.headers, answer.body)
                else:
                    self._send(200, {}, json.dumps(double.render(answer)))

            def _send(self, code: int, headers: dict[str, str], body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
