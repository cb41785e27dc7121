"""A counting semaphore in Redis: ``max_concurrent_ticks`` across every worker process.

Holders live in a sorted set scored by their expiry (Redis server time), so a
holder that dies without releasing frees its slot when its TTL passes. Acquire
and release are single Lua scripts; release removes only the caller's token. Acquire
is safe to retry (the runtime's Redis client re-sends a command whose reply was lost):
a retry that finds its own token holds that slot.
Acquiring also reads the plugin's reload version (``keys.kind_version_key`` of each
of its kinds, bumped when a ``pollers reload`` adds, changes or removes a job of that
kind) in the same round trip, so a long-lived plugin restarts when its own jobs
change, and not on a reload that only touched other jobs, without an extra Redis
call per tick.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from nexopoll.core.contract import CancelToken
from nexopoll.redisconf import ns

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local parts = {}
for i = 2, #KEYS do
  parts[#parts + 1] = redis.call('GET', KEYS[i]) or '-'
end
local version = table.concat(parts, ',')
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then  -- a retry after a lost reply: ours already
  return {1, version}
end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
  return {1, version}
end
return {0, version}
"""


def key(plugin_id: str) -> str:
    return ns(f"plugin:sem:{plugin_id}")


class Semaphore:
    def __init__(
        self,
        client,
        plugin_id: str,
        limit: int,
        ttl_ms: int,
        version_keys: str | Sequence[str] = (),
    ) -> None:
        self.client = client
        self.key = key(plugin_id)
        keys = [version_keys] if isinstance(version_keys, str) else list(version_keys)
        self.version_keys = keys or [self.key + ":noversion"]
        self.version: str | None = None  # the reload version seen at the last acquire
        self.limit = limit
        self.ttl_ms = ttl_ms
        self._acquire = client.register_script(_ACQUIRE)

    def try_acquire(self) -> str | None:
        token = uuid.uuid4().hex
        ok, version = self._acquire(
            keys=[self.key, *self.version_keys], args=[self.limit, self.ttl_ms, token]
        )
        self.version = version.decode() if isinstance(version, bytes) else str(version)
        return token if ok else None

    def acquire(self, deadline: float, cancel: CancelToken | None = None) -> str | None:
        """Wait for a slot until ``deadline`` (monotonic seconds); None if none came free."""
        pause = 0.005
        while True:
            token = self.try_acquire()
            if token is not None:
                return token
            if time.monotonic() + pause >= deadline or (cancel is not None and cancel.cancelled):
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def release(self, token: str) -> None:
        self.client.zrem(self.key, token)

    def holders(self) -> int:
        return int(self.client.zcard(self.key))
