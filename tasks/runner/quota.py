"""At most once per key and period, held in Redis: replies and notices to one person on a thread."""

from __future__ import annotations

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

    def __init__(self, redis: Redis, *, prefix: str = "onloop") -> None:
        self.prefix = prefix
        self._take = redis.register_script(_TAKE)

    def first(self, key: str, holder: str, seconds: int) -> bool:
        """Whether `holder` is the first in `seconds` to take `key` (or took it already)."""
        name = f"{self.prefix}:once:{key}"
        return bool(self._take(keys=[name], args=[holder, max(1, int(seconds))]))
