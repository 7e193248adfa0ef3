"""The HTTP front door: REST under /api/v3, git smart HTTP, web pages; every request recorded."""

from __future__ import annotations

import json
import sys
import traceback
import urllib.parse
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

from tests.doubles.github import git_http
from tests.doubles.github.api import (
    API_PREFIX,
    ApiError,
    Ctx,
    Response,
    Route,
    find_route,
    rate_headers,
)
from tests.doubles.github.auth import identify
from tests.doubles.github.model import ANONYMOUS, Call, Identity
from tests.doubles.github.routes import ROUTES, WEB_ROUTES
from tests.doubles.http_handler import NoDelayHandler

if TYPE_CHECKING:
    from tests.doubles.github.state import State

HIDDEN_HEADERS = {"authorization", "cookie", "proxy-authorization"}


class DoubleServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, state: State) -> None:
        super().__init__(("127.0.0.1", 0), DoubleHandler)
        self.state = state

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A crash in a handler is a bug in the double: keep it so the test fails (a client
        that hung up, e.g. a killed worker, is not)."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        self.state.errors.append(traceback.format_exc())

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _rate_key(ident: Identity) -> tuple[str, int]:
    if ident.kind == "installation":
        return f"installation:{ident.installation_id}", 5000
    if ident.kind in ("user", "app"):
        return f"{ident.kind}:{ident.login}", 5000
    return "anonymous", 60


class DoubleHandler(NoDelayHandler):
    protocol_version = "HTTP/1.1"
    server: DoubleServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _dispatch(self) -> None:
        state = self.server.state
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in self.headers.items()}
        shown = {k: v for k, v in headers.items() if k not in HIDDEN_HEADERS}
        path = url.path
        if path == API_PREFIX or path.startswith(API_PREFIX + "/"):
            self._rest("api", ROUTES, state, path[len(API_PREFIX) :] or "/", query, headers, shown)
        elif (m := git_http.GIT_PATH.match(path)) is not None:
            call = Call("git", self.command, path, query, None, ANONYMOUS, headers=shown)
            git_http.serve(self, state, call, m, url.query)
        else:
            self._rest("web", WEB_ROUTES, state, path, query, headers, shown)

    def _read_body(self, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return b"".join(git_http._body_chunks(self.rfile, headers))  # type: ignore[arg-type]
        length = int(headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _rest(
        self,
        surface: Literal["api", "web"],
        routes: list[Route],
        state: State,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        shown: dict[str, str],
    ) -> None:
        raw = self._read_body(headers)
        try:
            body_json = json.loads(raw) if raw else None
        except ValueError:
            body_json = None
        call = Call(surface, self.command, path, query, body_json, ANONYMOUS, headers=shown)
        state.record(call)  # on arrival (status 0 until answered), so in-flight calls show
        ident = ANONYMOUS
        try:
            with state.lock:
                route, params = find_route(routes, self.command, path)
                ident = call.identity = identify(state, headers)
            fault = state.take_fault(self.command, path)
            if fault is not None and fault.delay:
                state.pause(fault.delay, fault.released)
            if fault is not None and fault.status:
                call.fault = True
                response = Response(fault.status, fault.body, dict(fault.headers))
            else:
                ctx = Ctx(
                    state,
                    self.command,
                    path,
                    query,
                    headers,
                    raw,
                    self.server.base_url,
                    params,
                    ident,
                )
                with state.lock:
                    response = route.handler(ctx)
        except ApiError as exc:
            response = Response(exc.status, exc.body(), dict(exc.headers))
        except Exception as exc:  # a bug in the double: answer 500 and keep it for the test
            state.errors.append(traceback.format_exc())
            response = Response(500, {"message": f"GitHub double error: {exc!r}"})
        if surface == "api":
            key, limit = _rate_key(ident)
            response.headers.update(rate_headers(state.count_rate(key), limit))
        call.status = response.status
        self._send(response)

    def _send(self, response: Response) -> None:
        """JSON, or raw bytes (web pages, form-encoded OAuth answers) with their own type."""
        raw = isinstance(response.body, bytes)
        if response.status == 204:
            data = b""
        else:
            data = response.body if raw else json.dumps(response.body).encode()
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        if response.status != 204 and "Content-Type" not in response.headers:
            kind = "text/html; charset=utf-8" if raw else "application/json; charset=utf-8"
            self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Request-Id", f"DOUBLE:{id(response):x}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
