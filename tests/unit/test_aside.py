"""aside: work on a thread of its own, in the caller's context, its outcome a Future."""

from __future__ import annotations

import contextvars
import threading

import pytest

from app.core.aside import aside
from tasks.blueprints.mirror_fetch import MirrorFetch, Wanted

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_the_work_runs_on_its_own_thread_with_the_callers_context() -> None:
    WHO.set("job-7")
    seen = aside("reader", lambda: (WHO.get(), threading.current_thread().name)).result(10)
    assert seen == ("job-7", "reader")


def test_what_the_work_raised_is_raised_where_its_result_is_asked() -> None:
    def fails() -> None:
        raise RuntimeError("GitHub answered 502")

    future = aside("reader", fails)
    with pytest.raises(RuntimeError, match="502"):
        future.result(10)


def test_a_mirror_fetch_starts_once_and_a_failed_one_is_only_waited_for() -> None:
    asked: list[Wanted] = []
    release, ended = threading.Event(), threading.Event()

    def ensure(wanted: Wanted) -> None:
        asked.append(wanted)
        release.wait(10)
        ended.set()
        raise RuntimeError("the fetch failed")

    fetch = MirrorFetch(ensure)
    first = Wanted("a" * 40, ["refs/pull/7/head"], also=["c" * 40])
    fetch.prefetch(first)
    fetch.prefetch(Wanted("b" * 40))  # one is under way: no second fetch
    threading.Timer(0.05, release.set).start()
    fetch.wait()  # joins it; the sandbox's own check fetches again and says why
    assert ended.is_set() and asked == [first]
