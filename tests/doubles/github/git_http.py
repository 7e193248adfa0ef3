"""Git smart HTTP: token auth in front of `git http-backend` run as CGI, with pushes recorded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, BinaryIO

from tests.doubles.github import forks, gitrepo
from tests.doubles.github.api import ApiError
from tests.doubles.github.auth import authorize, credential, identify
from tests.doubles.github.model import ANONYMOUS, Call, Identity, Push, RefUpdate, Repo

if TYPE_CHECKING:
    from tests.doubles.github.state import State

GIT_PATH = re.compile(
    r"^/(?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?"
    r"/(?P<rest>info/refs|git-upload-pack|git-receive-pack|HEAD|objects/.+)$"
)
_repo_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
HTTP_BACKEND = shutil.which("git-http-backend") or os.path.join(
    subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout.strip(),
    "git-http-backend",
)


def _repo_lock(name: str) -> threading.Lock:
    with _locks_guard:
        return _repo_locks.setdefault(name, threading.Lock())


class Denied(Exception):
    def __init__(self, status: int, message: str, identity: Identity = ANONYMOUS) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.identity = identity


def _authenticate(
    state: State, headers: dict[str, str], repo: Repo | None, write: bool
) -> Identity:
    """The identity behind Basic auth `x-access-token:<token>`; Denied as GitHub's git does."""
    cred = (
        credential(headers)
        if headers.get("authorization", "").lower().startswith("basic ")
        else None
    )
    if cred is None:
        ident = ANONYMOUS
    elif cred[1] != "x-access-token":
        raise Denied(401, "Invalid username or password.")
    else:
        try:
            ident = identify(state, headers, allow_jwt=False)
        except ApiError as exc:
            raise Denied(401, "Invalid username or token.") from exc
    if repo is None:
        raise Denied(404 if ident.kind != "none" else 401, "Repository not found.")
    try:
        authorize(state, ident, repo, "contents", "write" if write else "read")
    except ApiError as exc:
        if ident.kind == "none":
            raise Denied(401, "Authentication required.") from exc
        if exc.status == 404:
            raise Denied(404, "Repository not found.", ident) from exc
        message = f"Permission to {repo.full_name}.git denied to {ident.login}."
        raise Denied(403, message, ident) from exc
    return ident


def _body_chunks(rfile: BinaryIO, headers: dict[str, str]) -> Iterator[bytes]:
    """The request body as it arrives: chunked transfer encoding or Content-Length."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return
            yield rfile.read(size)
            rfile.readline()
    remaining = int(headers.get("content-length") or 0)
    while remaining > 0:
        block = rfile.read(min(remaining, 65536))
        if not block:
            return
        remaining -= len(block)
        yield block


def serve(
    h: BaseHTTPRequestHandler, state: State, call: Call, match: re.Match[str], query: str
) -> None:
    """Answer one git request on `h`, recording the outcome in `call`."""
    headers = {k.lower(): v for k, v in h.headers.items()}
    rest = match["rest"]
    write = rest == "git-receive-pack" or "service=git-receive-pack" in query
    state.record(call)  # on arrival; status filled in when answered
    only: dict[str, str] = {}  # git config limiting a maintainer's push into a fork
    with state.lock:
        repo = state.find_repo(f"{match['owner']}/{match['name']}")
        try:
            ident = _authenticate(state, headers, repo, write)
        except Denied as exc:
            allowed = forks.maintainer_branches(state, repo, exc.identity) if repo else []
            if not (write and exc.status == 403 and allowed):
                call.status, call.identity = exc.status, exc.identity
                _plain(h, exc.status, exc.message)
                return
            ident, only = exc.identity, forks.push_only_to(allowed)
        if repo is not None and not write and rest == "info/refs":
            forks.sync_pull_refs(state, repo)
    assert repo is not None
    call.identity = ident
    fault = state.take_fault(call.method, call.path)
    if fault is not None and fault.delay:
        state.pause(fault.delay, fault.released)
    if fault is not None and fault.status:
        call.status, call.fault = fault.status, True
        _plain(h, fault.status, str((fault.body or {}).get("message", "fault")), fault.headers)
        return
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        **gitrepo.GIT_ENV,
        "GIT_PROJECT_ROOT": str(state.root / "git"),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": f"/{repo.owner}/{repo.name}.git/{rest}",
        "QUERY_STRING": query,
        "REQUEST_METHOD": h.command,
        "CONTENT_TYPE": headers.get("content-type", ""),
        "REMOTE_USER": ident.login or "",
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "GATEWAY_INTERFACE": "CGI/1.1",
    }
    env.update(only)
    env.update(state.protections.hook_env(state.root, repo, env))  # GitHub's own push checks
    for name, value in headers.items():
        if name not in ("authorization", "content-type", "content-length"):
            env["HTTP_" + name.upper().replace("-", "_")] = value
    if headers.get("content-length") and "chunked" not in headers.get("transfer-encoding", ""):
        env["CONTENT_LENGTH"] = headers["content-length"]
    pushing = h.command == "POST" and rest == "git-receive-pack"
    lock = _repo_lock(repo.full_name) if pushing else None
    if lock:
        lock.acquire()
    try:
        before = gitrepo.refs(repo.git_dir) if pushing else {}
        _run_backend(h, env, headers, call, state)
        if pushing:
            after = gitrepo.refs(repo.git_dir)
            updates = [
                RefUpdate(ref, before.get(ref), after.get(ref))
                for ref in sorted(set(before) | set(after))
                if before.get(ref) != after.get(ref)
            ]
            if updates:  # git's probe POST (and a rejected push) changes nothing
                state.pushes.append(Push(repo.full_name, ident, updates))
    finally:
        if lock:
            lock.release()


def _run_backend(
    h: BaseHTTPRequestHandler,
    env: dict[str, str],
    headers: dict[str, str],
    call: Call,
    state: State,
) -> None:
    log = open(state.root / "http-backend.log", "ab")
    proc = subprocess.Popen(
        [HTTP_BACKEND], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
    )
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        assert proc.stdin is not None
        try:
            for block in _body_chunks(h.rfile, headers):  # type: ignore[arg-type]
                proc.stdin.write(block)
        except (BrokenPipeError, ValueError):
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    status, out_headers = 200, []
    while True:
        line = proc.stdout.readline().rstrip(b"\r\n")
        if not line:
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        else:
            out_headers.append((name.strip(), value.strip()))
    call.status = status
    h.close_connection = True
    h.send_response(status)
    for name, value in out_headers:
        h.send_header(name, value)
    h.send_header("Connection", "close")
    h.end_headers()
    while block := proc.stdout.read(65536):
        h.wfile.write(block)
    h.wfile.flush()
    feeder.join()
    proc.wait()
    log.close()


def _plain(
    h: BaseHTTPRequestHandler, status: int, message: str, extra: dict[str, str] | None = None
) -> None:
    body = (message + "\n").encode()
    h.close_connection = True  # the request body, if any, was not read
    h.send_response(status)
    if status == 401:
        h.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
    for name, value in (extra or {}).items():
        h.send_header(name, value)
    h.send_header("Content-Type", "text/plain; charset=utf-8")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
