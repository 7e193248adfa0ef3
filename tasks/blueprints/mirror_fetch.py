"""A job's mirror brought up to date early, on a thread, while the job reads GitHub."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from app.core.aside import aside

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wanted:
    """What a job's sandbox will check out: `sha`, the `refs` to fetch besides branches for
    it (a fork's pull ref), and further commits it needs in the mirror, `also` (a rebase's
    base tip, which the mirror lacks whenever only the base moved)."""

    sha: str
    refs: Sequence[str] = ()
    also: Sequence[str] = ()


Ensure = Callable[[Wanted], object]


class MirrorFetch:
    """`prefetch(wanted)` starts fetching what the job's sandbox will check out (only when
    the mirror lacks some of it), so the fetch overlaps the job's GitHub reads; `wait` joins
    it before the sandbox's own check. A failed early fetch is only logged: the sandbox's
    check fetches again and reports the failure where it always did."""

    def __init__(self, ensure: Ensure) -> None:
        self.ensure = ensure
        self._fetch: Future[object] | None = None

    def prefetch(self, wanted: Wanted) -> None:
        """Start the fetch, unless one was started already."""
        if self._fetch is None:
            self._fetch = aside("mirror-fetch", self._fetched, wanted)

    def _fetched(self, wanted: Wanted) -> object:
        try:
            return self.ensure(wanted)
        except Exception:  # said where it happened, also when the job ended before waiting
            log.info("mirror.prefetch_failed", exc_info=True)
            raise

    def wait(self) -> None:
        """Until the early fetch, if any, has ended."""
        if self._fetch is not None:
            self._fetch.exception()
