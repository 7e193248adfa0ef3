"""gunicorn's thread worker with a deadline on reading each request, so stalled clients let go."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from gunicorn.http.errors import NoMoreData
from gunicorn.workers.gthread import ThreadWorker
from werkzeug.exceptions import ClientDisconnected

# Past its deadline a request still gets this long for each read: one a thread takes late
# (the pool was busy), with its bytes already here, is served; a stalled one is not.
GRACE = 0.01


class RequestTimedOut(NoMoreData, ClientDisconnected):
    """The request's line, headers and body did not all arrive within the read timeout.
    gunicorn takes it as a client gone (NoMoreData: the connection closes, one debug line);
    Flask, raised while a view reads the body, as a 400 (ClientDisconnected)."""

    description = "The request did not arrive within the server's read timeout."

    def __init__(self) -> None:
        NoMoreData.__init__(self)
        ClientDisconnected.__init__(self)


class DeadlineSocket:
    """A connection's socket whose reads share one deadline (set per request); writes and
    everything else go to the socket itself, unbounded by it."""

    def left(self) -> float:
        """Seconds a read may still wait (GRACE at least)."""
        return max(self.deadline - time.monotonic(), GRACE)

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.deadline = math.inf

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def recv(self, *args: Any) -> bytes:
        return self._read(self._sock.recv, *args)

    def recv_into(self, *args: Any) -> int:
        return self._read(self._sock.recv_into, *args)

    def _read(self, read: Callable[..., Any], *args: Any) -> Any:
        left = self.left()
        prior = self._sock.gettimeout()  # gunicorn's own bound (draining a body), if any
        self._sock.settimeout(left if prior is None else min(prior, left))
        try:
            return read(*args)
        except TimeoutError:
            if prior is not None and prior < left:
                raise  # gunicorn's bound, not ours: its own handling
            raise RequestTimedOut() from None
        finally:
            self._sock.settimeout(prior)


class ReadDeadlineWorker(ThreadWorker):
    """ThreadWorker whose threads give up a request that has not fully arrived (line,
    headers and body) `read_timeout` seconds after it was accepted (or, kept alive, began
    to arrive): half-sent requests cannot hold every thread, and so all webhook intake, for
    longer than that. gunicorn 27's own worker waits 5 s for a first byte, then reads
    without a bound."""

    read_timeout: float = 5.0

    @classmethod
    def bounded(cls, seconds: float) -> type[ReadDeadlineWorker]:
        """This worker class with `seconds` as its read timeout (for worker_class)."""
        return type(cls.__name__, (cls,), {"read_timeout": seconds, "__module__": __name__})

    def enqueue_req(self, conn: Any) -> None:
        """A new connection (accepted just now) or one with a next request arriving: its
        deadline starts now, while it may still wait in the pool's queue."""
        if not self.cfg.is_ssl and not isinstance(conn.sock, DeadlineSocket):
            conn.sock = DeadlineSocket(conn.sock)  # before conn.init: the parser reads it
        if isinstance(conn.sock, DeadlineSocket):
            conn.sock.deadline = time.monotonic() + self.read_timeout
        super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """gunicorn's, but a new connection that sent nothing gets only until its deadline
        for a first byte (gunicorn's own wait is 5 s from when a thread takes it), then it
        is closed."""
        sock = conn.sock
        if isinstance(sock, DeadlineSocket) and not conn.initialized:
            if not conn.wait_for_data(sock.left()):
                return False
        return super().handle(conn)

    def is_parent_alive(self) -> bool:
        """Whether the master lives; when it is gone (killed), this worker lets go of the
        port at once, not after draining its connections (up to graceful_timeout): the
        master that replaces it binds the port again within a second or two."""
        if super().is_parent_alive():
            return True
        self.set_accept_enabled(False)
        for listener in self.sockets:
            listener.close()
        return False
