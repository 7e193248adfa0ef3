"""A database that a test takes down and brings back, for one process (a worker) only.

PostgreSQL: the process reaches it through a TCP gate on a port of its own; shutting the gate
refuses new connections and cuts open ones, as a stopped server does, while the machine's
server (and the test's own connections) go on. SQLite: the process opens the file through a
symlinked folder; while down the link points at a folder where the file is a directory, which
SQLite cannot open, and bringing it back points the link at the real file again.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.doubles.redis_server import free_port


class TcpGate:
    """Forwards 127.0.0.1:`port` to `target` while open; refuses and cuts while shut."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, free_port()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:  # shutdown wakes the accepting thread; close alone would not
            _close(listener)
        with self._lock:
            live, self._open = self._open, []
        for conn in live:
            _close(conn)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # shut
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


class DatabaseOutage:
    """`url` is the database at `real_url` as the process under test must reach it."""

    def __init__(self, real_url: str, workdir: Path) -> None:
        parsed = make_url(real_url)
        self._gate: TcpGate | None = None
        self._link: Path | None = None
        if parsed.get_backend_name() == "sqlite":
            real = Path(str(parsed.database))
            self._real_dir = real.parent
            self._void = workdir / "void"
            (self._void / real.name).mkdir(parents=True)  # a directory: no database opens
            self._link = workdir / "db-link"
            self.url = f"sqlite:///{self._link / real.name}"
        else:
            self._gate = TcpGate((parsed.host or "127.0.0.1", parsed.port or 5432))
            gated = parsed.set(host="127.0.0.1", port=self._gate.port)
            self.url = gated.render_as_string(hide_password=False)
        self.up()

    def down(self) -> None:
        if self._gate is not None:
            self._gate.shut()
        else:
            self._point(self._void)

    def up(self) -> None:
        if self._gate is not None:
            self._gate.open()
        else:
            self._point(self._real_dir)

    def _point(self, folder: Path) -> None:
        assert self._link is not None
        fresh = self._link.with_name(self._link.name + ".new")
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(folder, target_is_directory=True)
        os.replace(fresh, self._link)  # atomic: the process sees one folder or the other

    def close(self) -> None:
        if self._gate is not None:
            self._gate.shut()
