"""onloop's GitHub clients under GitHub's limits: Retry-After, x-ratelimit-reset, bounded
concurrent writes per installation, and conditional reads with ETags."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from github import RateLimitExceededException

from app.core.settings import Settings
from app.github import clients as gh
from app.github.conditional import ETagCache, conditional_contents, conditional_get
from app.github.write_slots import WriteSlots
from tests.doubles.github import GitHubDouble
from tests.doubles.github.settings import settings_for
from tests.doubles.redis_server import RedisServer

Answer = tuple[int, dict[str, str], Any]


class Stub:
    """A tiny HTTP server for what the double does not do (ETags, primary limit headers):
    `handler(method, path, headers) -> (status, headers, json body)`; requests are kept."""

    def __init__(self, handler: Callable[[str, str, dict[str, str]], Answer]) -> None:
        stub = self
        self.requests: list[tuple[str, str, dict[str, str]]] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                length = int(headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                stub.requests.append((self.command, self.path, headers))
                status, extra, body = handler(self.command, self.path, headers)
                data = b"" if status == 304 else json.dumps(body).encode()
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_PATCH = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v3"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory() -> Iterator[Callable[..., Stub]]:
    made: list[Stub] = []

    def make(handler: Callable[[str, str, dict[str, str]], Answer]) -> Stub:
        made.append(Stub(handler))
        return made[-1]

    yield make
    for stub in made:
        stub.close()


def app_for(api_url: str, write_concurrency: int = 1) -> gh.GitHubApp:
    """The App at `api_url` as one worker builds it: without Redis, only its own write slots."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        github_api_url=api_url,
        app_slug="onloop",
        github_pacing=False,
        github_write_concurrency=write_concurrency,
    )
    return gh.GitHubApp.for_settings(settings)


def client_for(github: gh.GitHubApp | str, installation_id: int = 1) -> Any:
    """An installation client of `github` (or of a GitHubApp of its own at that API URL)."""
    app = app_for(github) if isinstance(github, str) else github
    token = gh.InstallationToken(
        "ghs_stubstubstubstub",
        datetime.now(UTC) + timedelta(hours=1),
        installation_id=installation_id,
    )
    return app.installation_client(token)


def test_a_write_through_a_secondary_rate_limit_waits_and_succeeds(
    github_double: GitHubDouble, tmp_path: Path
) -> None:
    double = github_double
    double.create_repo("octo/hello", files={"README.md": "hi\n"})
    settings = settings_for(double, tmp_path)
    installation = next(i.id for i in double.installations.values() if i.account == "octo")
    github = gh.GitHubApp.for_settings(settings)
    client = github.installation_client(github.installation_token(installation))
    issue = client.get_repo("octo/hello").get_issue(double.create_issue("octo/hello", "x").number)
    double.secondary_rate_limit(1, retry_after=1, method="POST", path_prefix="/repos/octo/hello")
    issue.create_comment("after the limit")
    posts = double.calls("POST", "/repos/octo/hello/issues")
    assert [c.status for c in posts] == [403, 201]
    assert [c.body for c in double.comments("octo/hello", issue.number)] == ["after the limit"]


@pytest.mark.parametrize("status", [403, 429])
def test_the_primary_limit_waits_for_x_ratelimit_reset(
    stub_factory: Callable[..., Stub], status: int
) -> None:
    answers: list[Answer] = [
        (
            status,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 1)},
            {"message": "API rate limit exceeded for installation ID 1."},
        ),
        (200, {"x-ratelimit-remaining": "4999"}, {"full_name": "o/r"}),
    ]
    stub = stub_factory(lambda method, path, headers: answers.pop(0))
    _, data = client_for(stub.api_url).requester.requestJsonAndCheck("GET", "/repos/o/r")
    assert data["full_name"] == "o/r"
    assert [r[1] for r in stub.requests] == ["/api/v3/repos/o/r"] * 2


def test_a_reset_too_far_away_fails_instead_of_sleeping(stub_factory: Callable[..., Stub]) -> None:
    reset = str(int(time.time()) + 7200)
    stub = stub_factory(
        lambda method, path, headers: (
            429,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset},
            {"message": "API rate limit exceeded"},
        )
    )
    with pytest.raises(RateLimitExceededException):
        client_for(stub.api_url).requester.requestJsonAndCheck("GET", "/repos/o/r")
    assert len(stub.requests) == 1


def test_repeated_reads_are_conditional(stub_factory: Callable[..., Stub]) -> None:
    content = {"text": "commands: [fix]\n", "etag": '"v1"'}

    def answer(method: str, path: str, headers: dict[str, str]) -> Answer:
        if headers.get("if-none-match") == content["etag"]:
            return 304, {"ETag": content["etag"]}, None
        body = {
            "type": "file",
            "sha": content["etag"].strip('"'),
            "content": base64.b64encode(content["text"].encode()).decode(),
        }
        return 200, {"ETag": content["etag"]}, body

    stub = stub_factory(answer)
    client, cache = client_for(stub.api_url), ETagCache()
    path = "/repos/o/r/contents/.github/onloop.yml"
    first = conditional_get(client, path, {"ref": "main"}, cache=cache)
    again = conditional_get(client, path, {"ref": "main"}, cache=cache)
    assert again == first and cache.hits == 1
    assert [r[2].get("if-none-match") for r in stub.requests] == [None, '"v1"']
    content.update(text="commands: [rebase]\n", etag='"v2"')
    changed = conditional_get(client, path, {"ref": "main"}, cache=cache)
    assert changed != first and cache.hits == 1
    made = client.get_user()  # any object the client made will do (no request yet)
    assert conditional_contents(made, "o/r", ".github/onloop.yml", "main", cache) == (
        "commands: [rebase]\n",
        "v2",
    )


def test_writes_per_installation_are_bounded(stub_factory: Callable[..., Stub]) -> None:
    """ONLOOP_GITHUB_WRITE_CONCURRENCY writes of one installation are in flight at once, no
    more; another installation's writes do not count against them."""
    lock = threading.Lock()
    in_flight: dict[str, int] = {"now": 0, "peak": 0}
    go_on = threading.Event()

    def answer(method: str, path: str, headers: dict[str, str]) -> Answer:
        if method == "GET":
            return 200, {}, {"ok": True}
        with lock:
            in_flight["now"] += 1
            in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        go_on.wait(30)
        with lock:
            in_flight["now"] -= 1
        return 201, {}, {"id": 1}

    stub = stub_factory(answer)
    github = app_for(stub.api_url, write_concurrency=3)  # the worker's one

    def post(n: int) -> None:
        client = client_for(github, installation_id=5)  # one client per job
        client.requester.requestJsonAndCheck(
            "POST", "/repos/o/r/issues/1/comments", input={"body": str(n)}
        )

    threads = [threading.Thread(target=post, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while in_flight["now"] < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # room for a fourth, were the bound not kept
    assert in_flight["now"] == 3
    go_on.set()
    for thread in threads:
        thread.join(timeout=60)
    assert len([r for r in stub.requests if r[0] == "POST"]) == 6
    assert in_flight["peak"] == 3


def test_two_github_apps_share_no_write_lock(stub_factory: Callable[..., Stub]) -> None:
    """Nothing process-wide is left: a GitHubApp's writes wait only for its own serializer's
    locks (and Redis, when configured), never for another GitHubApp's in the same process."""
    stub = stub_factory(lambda method, path, headers: (201, {}, {"id": 1}))
    first, second = app_for(stub.api_url), app_for(stub.api_url)

    def post(github: gh.GitHubApp) -> threading.Thread:
        client = client_for(github, installation_id=5)
        thread = threading.Thread(
            target=client.requester.requestJsonAndCheck,
            args=("POST", "/repos/o/r/issues/1/comments"),
            kwargs={"input": {"body": "hi"}},
        )
        thread.start()
        return thread

    with first.write_slots.hold("installation:5"):
        other = post(second)
        other.join(10)
        assert not other.is_alive()  # the other App's write went through meanwhile
        own = post(first)
        own.join(0.5)
        assert own.is_alive()  # its own write waits for the lock
        assert len(stub.requests) == 1
    own.join(10)
    assert not own.is_alive() and len(stub.requests) == 2


def test_one_write_slot_holds_across_processes_through_redis(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        first, second = WriteSlots(server.url, 1), WriteSlots(server.url, 1)  # two workers
        order: list[str] = []
        entered = threading.Event()

        def hold_a_while() -> None:
            with first.hold("installation:5"):
                entered.set()
                order.append("first in")
                time.sleep(0.3)
                order.append("first out")

        thread = threading.Thread(target=hold_a_while)
        thread.start()
        assert entered.wait(10)
        with second.hold("installation:5"):
            order.append("second in")
        with second.hold("installation:6"):  # another installation is not held up
            pass
        thread.join(10)
        assert order == ["first in", "first out", "second in"]
    finally:
        server.stop()
