"""A job's mirror brought up to date early, on a thread, while the job reads GitHub."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

Ensure = Callable[[str, Sequence[str]], object]


class MirrorFetch:
    """`prefetch(sha, refs)` starts fetching what the job's sandbox will check out (only
    when the mirror lacks `sha`), so the fetch overlaps the job's GitHub reads; `wait` joins
    it before the sandbox's own check. A failed early fetch is only logged: the sandbox's
    check fetches again and reports the failure where it always did."""

    def __init__(self, ensure: Ensure) -> None:
        self.ensure = ensure
        self._thread: threading.Thread | None = None

    def prefetch(self, sha: str, refs: Sequence[str] = ()) -> None:
        """Start the fetch, unless one was started already."""
        if self._thread is not None:
            return

        def work() -> None:
            try:
                self.ensure(sha, refs)
            except Exception:
                log.info("mirror.prefetch_failed", exc_info=True)

        run = contextvars.copy_context().run  # the job's log context (job_id) on its lines
        self._thread = threading.Thread(target=run, args=(work,), name="mirror-fetch", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the early fetch, if any, has ended."""
        if self._thread is not None:
            self._thread.join()
