"""The hostile-request mix: the same GUID 50 times at once, the same comment under five GUIDs,
and 16 slow clients holding connections while deliveries go on. No 5xx, one job a comment."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tests.faults.figures import Figures
from tests.faults.harness import Stack, scale, seconds
from tests.faults.sender import Delivery, Sender
from tests.faults.slow import slow_post

pytestmark = pytest.mark.faults


def no_5xx(sender: Sender, may_drop: frozenset[str] = frozenset()) -> None:
    """No answer is a 5xx; only the deliveries in `may_drop` (by GUID) may get none at all."""
    answers = [(a.guid in may_drop, a.status) for a in sender.answers]
    assert all((s is None and dropped) or (s is not None and s < 500) for dropped, s in answers), [
        s for _, s in answers
    ]


def at_once(stack: Stack, name: str, sender: Sender, copies: int, *, new_guids: bool) -> Figures:
    (one,) = stack.deliveries(1)
    sent = [replace(one, guid=str(uuid.uuid4())) if new_guids else one for _ in range(copies)]
    barrier = threading.Barrier(copies)

    def post(d: Delivery) -> None:
        barrier.wait()
        sender.post(d)

    with ThreadPoolExecutor(copies) as pool:
        list(pool.map(post, sent))
    return stack.figures(name, sender, timeout=60)


def test_the_same_guid_50_times_at_once(stack: Stack) -> None:
    sender = Sender(stack.sender().url, threads=50)
    found = at_once(stack, "same GUID x50", sender, 50, new_guids=False)
    no_5xx(sender)
    statuses = sorted(a.status or 0 for a in sender.answers)
    assert statuses.count(202) == 1 and statuses.count(200) == 49, statuses
    assert (found.recorded, found.jobs, found.finished_once) == (1, 1, 1), found
    assert found.lost == 0 and found.duplicated == 0, stack.logs()


def test_the_same_comment_under_five_guids(stack: Stack) -> None:
    sender = stack.sender()
    found = at_once(stack, "same comment x5 GUIDs", sender, 5, new_guids=True)
    no_5xx(sender)
    assert (found.recorded, found.jobs, found.finished_once) == (5, 1, 1), found
    assert found.lost == 0 and found.duplicated == 0, stack.logs()


def test_16_slow_clients(stack: Stack) -> None:
    sender = stack.sender()
    hold = max(10.0, seconds(25))  # how long each slow client takes to send its body
    count = max(20, scale() // 2)
    slow = stack.deliveries(16)
    threads = [threading.Thread(target=slow_post, args=(sender, d, hold)) for d in slow]
    for t in threads:
        t.start()
    sender.send(stack.deliveries(count), rate=count / hold)
    for t in threads:
        t.join()
    found = stack.figures("16 slow clients", sender, timeout=120)
    # A slow client cut off at the read deadline may find the connection closed before it
    # reads the 408: no answer at all, which is still not a 5xx.
    no_5xx(sender, may_drop=frozenset(d.guid for d in slow))
    # Every delivery sent at a normal pace is acknowledged; the 16 that take longer than
    # ONLOOP_WEB_READ_TIMEOUT to arrive are refused (4xx, never a 5xx), so they hold no
    # thread and GitHub shows them failed, for `onloop redeliver`.
    assert found.sent == count + 16 and found.acknowledged == count, found
    assert found.lost == 0 and found.duplicated == 0, stack.logs()
