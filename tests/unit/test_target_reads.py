"""A job's push targets: read once per branch and repository, early on a thread of its own
when prefetched; a failed early read is read again where the push asks for it."""

from __future__ import annotations

import threading

import pytest

from tasks.blueprints.target_reads import TargetReads
from tasks.blueprints.targets import Refusal, Target


class Reads:
    """GitHub's answers, counted, with the thread each read ran on."""

    def __init__(self, failures: int = 0) -> None:
        self.calls: list[tuple[str, str | None, str]] = []
        self.failures = failures  # the first reads that fail
        self.release = threading.Event()

    def __call__(self, branch: str, head_repo: str | None) -> Target:
        self.calls.append((branch, head_repo, threading.current_thread().name))
        self.release.wait(10)
        if len(self.calls) <= self.failures:
            raise RuntimeError("GitHub answered 502")
        refusal = Refusal.PROTECTED if branch == "main" else None
        return Target(head_repo or "octo/widgets", branch, refusal)


def test_a_target_is_read_once_and_a_prefetch_reads_it_beside_the_job() -> None:
    reads = Reads()
    targets = TargetReads(reads, "Octo/Widgets")
    targets.prefetch("onloop/issue-1")
    targets.prefetch("onloop/issue-1")  # already under way: no second read
    reads.release.set()
    first = targets.get("onloop/issue-1")
    assert targets.get("onloop/issue-1", "octo/widgets") is first  # the same repository
    assert first.allowed and reads.calls == [("onloop/issue-1", None, "push-target")]
    fork = targets.get("onloop/issue-1", "alice/widgets")
    assert fork.repo == "alice/widgets" and len(reads.calls) == 2
    assert not targets.get("main").allowed and reads.calls[-1][2] != "push-target"


def test_a_failed_prefetch_is_read_again_where_the_push_asks() -> None:
    reads = Reads(failures=2)
    targets = TargetReads(reads, "octo/widgets")
    targets.prefetch("feature")
    reads.release.set()
    with pytest.raises(RuntimeError, match="502"):  # read again, and GitHub still fails
        targets.get("feature")
    assert [c[2] for c in reads.calls] == ["push-target", threading.current_thread().name]
    assert targets.get("feature").allowed and len(reads.calls) == 3  # GitHub is back


def test_a_target_in_flight_is_waited_for_not_read_twice() -> None:
    reads = Reads()
    targets = TargetReads(reads, "octo/widgets")
    targets.prefetch("feature")
    threading.Timer(0.2, reads.release.set).start()
    assert targets.get("feature").allowed and len(reads.calls) == 1


def test_a_renewed_target_is_read_again_beside_the_job_and_kept_for_later_asks() -> None:
    reads = Reads()
    reads.release.set()
    targets = TargetReads(reads, "octo/widgets")
    first = targets.get("feature")
    targets.renew("feature")  # a force-push wants GitHub's word as its step starts
    again = targets.get("feature")
    assert again is not first and len(reads.calls) == 2 and reads.calls[-1][2] == "push-target"
    assert targets.get("feature") is again and len(reads.calls) == 2
