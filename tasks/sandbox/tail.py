"""A command's output stream as onloop keeps it: at most a limit of bytes, the tail."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import IO


class TailBuffer:
    """Collects a stream, keeping at most `limit` bytes (the end: that is where errors are)."""

    def __init__(self, limit: int, listener: Callable[[bytes], None] | None = None) -> None:
        self.limit = limit
        self.listener = listener  # told of every chunk as it comes (the job page's live log)
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.lock = threading.Lock()

    def add(self, data: bytes) -> None:
        """Append a chunk, dropping the oldest bytes past the limit."""
        if self.listener is not None:
            try:
                self.listener(data)
            except Exception:  # noqa: S110 - the live log must never fail a command
                pass
        with self.lock:
            self.chunks.append(data)
            self.size += len(data)
            if self.size > 2 * self.limit:
                self._compact()

    def _compact(self) -> None:
        joined = b"".join(self.chunks)
        if len(joined) > self.limit:
            self.truncated = True
            joined = joined[-self.limit :]
        self.chunks, self.size = [joined], len(joined)

    def text(self) -> str:
        """The kept bytes, decoded."""
        with self.lock:
            self._compact()
            return self.chunks[0].decode("utf-8", "replace") if self.chunks else ""

    def drain(self, stream: IO[bytes]) -> None:
        """Read `stream` to its end (in a thread)."""
        for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
            self.add(chunk)
