"""Work started on a thread of its own, in a copy of the caller's context: a Future."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def aside(name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
    """Run `fn(*args, **kwargs)` now on a daemon thread called `name`, with the caller's
    contextvars (a job's log fields and trace span): its result, or what it raised, is the
    Future's. Nothing waits for it unless the caller does (`result`, `exception`)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the caller's to raise, where it asks for the result
            future.set_exception(exc)

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name=name, daemon=True).start()
    return future
