"""A local PEP 503 package index of hand-made wheels, for the egress tests and bench/setup.py."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import random
import ssl
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.doubles.http_handler import NoDelayHandler


def make_wheel(name: str, version: str = "1.0", module: str = "", padding: int = 0) -> bytes:
    """A pure-Python wheel installing module `<name with _>` (with `padding` bytes of
    incompressible data beside it, for a download of some size)."""
    mod = name.replace("-", "_")
    dist = f"{mod}-{version}.dist-info"
    files: dict[str, bytes] = {
        f"{mod}/__init__.py": (module or f"NAME = {name!r}\n").encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: onloop-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    if padding:
        files[f"{mod}/data.bin"] = _noise(padding)
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return out.getvalue()


def _noise(size: int) -> bytes:
    return random.Random(size).randbytes(size)


class PackageIndex:
    """Serves `/simple/<project>/` and `/files/<wheel>` on `host`; wheels carry PyPI's long
    Cache-Control. With `auth` ("user:password") every request needs it; `rate` (bytes/s)
    throttles downloads; with `tls` it serves HTTPS. `requests` records (path, Authorization
    header) of each request."""

    def __init__(
        self,
        host: str,
        *,
        auth: str | None = None,
        rate: float | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.wheels: dict[str, tuple[str, bytes]] = {}  # file name -> (project, data)
        self.auth = "Basic " + base64.b64encode(auth.encode()).decode() if auth else None
        self.rate = rate
        self.requests: list[tuple[str, str]] = []
        self.methods: list[tuple[str, str, str]] = []  # (method, path, Authorization header)
        index = self

        class Handler(NoDelayHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index.handle(self)

            def do_HEAD(self) -> None:
                index.handle(self)

            def do_POST(self) -> None:  # an upload: read, recorded, then answered as a GET
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                index.handle(self)

            do_PUT = do_POST

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = str(self.httpd.server_address[0]), self.httpd.server_address[1]
        return f"{self.scheme}://{host}:{port}"

    def add(self, name: str, version: str = "1.0", **kwargs: Any) -> str:
        """Publish a wheel; its file name."""
        filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        self.wheels[filename] = (name, make_wheel(name, version, **kwargs))
        return filename

    def downloads(self, filename: str) -> int:
        """How many times the wheel was fetched."""
        return sum(1 for path, _ in self.requests if path == f"/files/{filename}")

    def __enter__(self) -> PackageIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        header = req.headers.get("Authorization") or ""
        self.requests.append((req.path, header))
        self.methods.append((req.command, req.path, header))
        if self.auth and header != self.auth:
            self._send(req, 401, b"auth needed\n", {"WWW-Authenticate": 'Basic realm="idx"'})
            return
        parts = [p for p in req.path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            links = [
                f'<a href="/files/{f}#sha256={hashlib.sha256(d).hexdigest()}">{html.escape(f)}</a>'
                for f, (project, d) in sorted(self.wheels.items())
                if project == parts[1]
            ]
            if links:
                body = ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()
                self._send(req, 200, body, {"Content-Type": "text/html"})
                return
        if len(parts) == 2 and parts[0] == "files" and parts[1] in self.wheels:
            cache = {"Cache-Control": "max-age=365000000, immutable, public"}
            self._send(req, 200, self.wheels[parts[1]][1], cache, throttle=True)
            return
        self._send(req, 404, b"not found\n", {})

    def _send(
        self,
        req: BaseHTTPRequestHandler,
        code: int,
        body: bytes,
        headers: dict[str, str],
        throttle: bool = False,
    ) -> None:
        req.send_response(code)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            req.send_header(key, value)
        req.end_headers()
        if req.command == "HEAD":
            return
        step = 64 * 1024
        for start in range(0, len(body), step):
            req.wfile.write(body[start : start + step])
            if throttle and self.rate:
                time.sleep(step / self.rate)
