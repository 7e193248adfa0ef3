"""At most once per key and period, held in Redis: replies and notices to one person on a thread."""

from __future__ import annotations

import time

import redis
from redis import Redis

# Take `key` for `holder` (a job id) for `seconds`: 1 when it was free or is already the
# holder's (the same job run again keeps its turn), 0 when another holder has it. One script,
# so the check and the take cannot be split by the key expiring in between.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', tonumber(ARGV[2])) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""


class Once:
    """Keys that one holder takes for a period (Redis `SET NX EX`); built once by the worker,
    on the Redis it uses for its caps. The keys expire by themselves: nothing to clean up."""

    def __init__(self, client: Redis, *, prefix: str = "onloop", patience: float = 60.0) -> None:
        self.prefix, self.patience = prefix, patience
        self._take = client.register_script(_TAKE)

    def first(self, key: str, holder: str, seconds: int) -> bool:
        """Whether `holder` is the first in `seconds` to take `key` (or took it already).
        While Redis does not answer it asks again, with backoff, for up to `patience` seconds:
        a reply waits out a short outage rather than failing its job (or answering twice)."""
        name = f"{self.prefix}:once:{key}"
        deadline, pause = time.monotonic() + self.patience, 0.25
        while True:
            try:
                return bool(self._take(keys=[name], args=[holder, max(1, int(seconds))]))
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 5.0)
