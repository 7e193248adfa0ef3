"""A job's push targets, each read from GitHub once, and early in the background when asked."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

from app.core.aside import aside
from tasks.blueprints.targets import Target

Read = Callable[[str, str | None], Target]


class TargetReads:
    """Where a job may push, per (branch, repository): the first ask reads it (the branch's
    rules, protection and signature needs: two to four GitHub calls), later asks reuse it.
    `prefetch` starts that read on a thread of its own, so a blueprint that knows its branch
    early reads it while the sandbox works. The answer may be a few seconds old when the
    push comes; GitHub still enforces protection and rulesets on the push itself, and a
    refusal there is reported as such (pushes.rejected_as_protected)."""

    def __init__(self, read: Read, here: str) -> None:
        self.read, self.here = read, here.lower()
        self._found: dict[tuple[str, str], Future[Target]] = {}

    def _key(self, branch: str, head_repo: str | None) -> tuple[str, str]:
        return branch, (head_repo or self.here).lower()

    def prefetch(self, branch: str, head_repo: str | None = None) -> None:
        """Start reading the target, unless it is read or being read already."""
        key = self._key(branch, head_repo)
        if key in self._found:
            return
        self._found[key] = aside("push-target", self.read, branch, head_repo)

    def renew(self, branch: str, head_repo: str | None = None) -> None:
        """Read the target again, from now, on a thread: what later asks get. For a push
        that must see GitHub's word as it is when its step starts, not as read early."""
        self._found.pop(self._key(branch, head_repo), None)
        self.prefetch(branch, head_repo)

    def get(self, branch: str, head_repo: str | None = None) -> Target:
        """The target: as read before (or being read), else read now; again when the
        early read failed."""
        key = self._key(branch, head_repo)
        early = self._found.get(key)
        if early is not None and early.exception() is not None:
            del self._found[key]
        if key not in self._found:
            future: Future[Target] = Future()
            try:
                future.set_result(self.read(branch, head_repo))
            except BaseException as exc:
                future.set_exception(exc)
            self._found[key] = future
        return self._found[key].result()
