"""A tiny smart-HTTP git server (git http-backend as CGI) with token auth, for tests and bench."""

from __future__ import annotations

import base64
import shutil
import subprocess
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from tests.doubles.http_handler import NoDelayHandler


class GitServer:
    """Serves bare repositories under `root` at http://127.0.0.1:PORT/<name>.git.

    With `token`, every request needs Basic auth `x-access-token:<token>`. `requests` records
    each request's method, path and whether it was authorised, so tests can see what git did.
    """

    def __init__(self, root: Path, token: str | None = None) -> None:
        self.root = root
        self.token = token
        self.requests: list[tuple[str, str, bool]] = []
        self.backend = _http_backend()
        server = self

        class Handler(NoDelayHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.handle(self)

            def do_POST(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}.git"

    def __enter__(self) -> GitServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def authorised(self, header: str | None) -> bool:
        if self.token is None:
            return True
        expected = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        return header == f"Basic {expected}"

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(req.path)
        ok = self.authorised(req.headers.get("Authorization"))
        self.requests.append((req.command, parts.path, ok))
        if not ok:
            req.send_response(401)
            req.send_header("WWW-Authenticate", 'Basic realm="git"')
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        body = _read_body(req)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": req.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": req.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": req.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": req.headers.get("Content-Encoding", ""),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root),
        }
        proc = subprocess.Popen(
            self.backend, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        feeder = threading.Thread(target=_feed, args=(proc.stdin, body), daemon=True)
        feeder.start()
        status, headers = 200, []
        while line := proc.stdout.readline().rstrip(b"\r\n"):
            key, _, value = line.decode().partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((key, value.strip()))
        req.send_response(status)
        for key, value in headers:
            req.send_header(key, value)
        req.end_headers()
        shutil.copyfileobj(proc.stdout, req.wfile, 1 << 20)
        proc.wait()
        feeder.join()


def _feed(stdin: IO[bytes], body: bytes) -> None:
    try:
        stdin.write(body)
    finally:
        stdin.close()


def _read_body(req: BaseHTTPRequestHandler) -> bytes:
    if req.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(req.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                req.rfile.readline()
                return b"".join(chunks)
            chunks.append(req.rfile.read(size))
            req.rfile.readline()
    return req.rfile.read(int(req.headers.get("Content-Length") or 0))


def _http_backend() -> list[str]:
    exec_path = subprocess.run(
        ["git", "--exec-path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return [str(Path(exec_path) / "git-http-backend")]


def make_repo(bare: Path, files: Mapping[str, str | bytes], message: str = "initial") -> str:
    """A bare repository at `bare` with one commit on `main` holding `files`; its sha."""
    work = bare.with_name(bare.name + ".work")
    env_args = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    for name, content in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", *env_args, "-C", str(work), "commit", "-q", "-m", message], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    shutil.rmtree(work)
    return subprocess.run(
        ["git", "-C", str(bare), "rev-parse", "main"], capture_output=True, text=True, check=True
    ).stdout.strip()
