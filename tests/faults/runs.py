"""One fault run: `scale()` deliveries posted with a fault beside them, then its figures."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.faults.figures import Figures
from tests.faults.harness import Stack, scale
from tests.faults.sender import Sender

RATE = 20.0  # deliveries a second: 1,000 take 50 s, a fault sits in the middle


def run(
    stack: Stack,
    name: str,
    fault: Callable[[], None] | None = None,
    timeout: float = 180,
    sender: Sender | None = None,
    rate: float | None = RATE,
    count: int | None = None,
) -> Figures:
    """Post `count` (`scale()`) deliveries at `rate` a second (None: at once) with `fault`
    running beside them; the figures, what has not finished `timeout` s after the last
    answer counted lost."""
    sender = sender or stack.sender()
    side = threading.Thread(target=fault) if fault else None
    if side:
        side.start()
    sender.send(stack.deliveries(count or scale()), rate=rate)
    if side:
        side.join()
    sender.redeliver()  # what was refused while down, asked for again as `onloop redeliver`
    return stack.figures(name, sender, timeout=timeout)
