"""What a job's sandboxes leave to do, held back one step so it does not slow the push."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable


class Teardown:
    """Removing a sandbox and refilling the warm pool are work for dockerd, containerd and
    runc: a container's removal and a new one's start take a core for 0.1 to 0.2 s. Run at
    once, they compete with what the job does next, its push or review, on a small machine.
    So each is held while the step that follows the one it was added in runs, then started
    on a thread of its own; `finish` (at the job's end) starts the rest and joins them all.

    The runner calls `begin` when a step starts and `release(mark)` with what `begin` gave
    it when the step ends, whatever its outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps = 0  # steps begun so far
        self._held: list[tuple[int, str, Callable[[], None]]] = []
        self._threads: list[threading.Thread] = []

    def add(self, name: str, fn: Callable[[], None]) -> None:
        """Hold `fn` until the step after this one ends (or the job does)."""
        with self._lock:
            self._held.append((self._steps, name, fn))

    def begin(self) -> int:
        """A step starts: its mark."""
        with self._lock:
            self._steps += 1
            return self._steps

    def release(self, mark: int) -> None:
        """The step with `mark` ended: start what was added before it began."""
        with self._lock:
            due = [(n, fn) for added, n, fn in self._held if added < mark]
            self._held = [h for h in self._held if h[0] >= mark]
        self._start(due)

    def finish(self, timeout: float = 120.0) -> None:
        """Start everything still held, then wait (at most `timeout` s) for all of it."""
        with self._lock:
            due = [(n, fn) for _, n, fn in self._held]
            self._held = []
        self._start(due)
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def held(self) -> list[str]:
        """The names of what is held now (for tests and logs)."""
        with self._lock:
            return [name for _, name, _ in self._held]

    def _start(self, due: list[tuple[str, Callable[[], None]]]) -> None:
        for name, fn in due:
            run = contextvars.copy_context().run  # the job's log context on its lines
            thread = threading.Thread(target=run, args=(fn,), name=f"onloop-{name}", daemon=True)
            with self._lock:
                self._threads.append(thread)
            thread.start()
