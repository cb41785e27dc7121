"""Provider rate limits held across every worker process and machine, in Redis.

Each scope (``telegram:bot:ana_bot``, ``telegram:chat:ana_bot:42``…) is a GCRA
slot: Redis keeps the scope's "next allowed" time, in milliseconds of the Redis
server's own clock (``TIME``), so worker clocks never matter. :func:`acquire`
takes a turn in every scope of a message at once or in none: it returns 0 when the
message may go now (the turns are taken), else the seconds until it may. Turns are
spaced evenly (``1 / rate`` apart, no burst), so no second ever holds more than
``rate`` sends of one scope.
"""

from __future__ import annotations

from collections.abc import Sequence

from .keys import ns

PREFIX = ns("rate:")  # "nexopoll:rate:" (NEXOPOLL_REDIS_PREFIX)

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  if tat - now > wait then wait = tat - now end
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[i])
  redis.call('SET', key, tostring(tats[i] + interval), 'PX', math.ceil(interval) + 1000)
end
return 0
"""


def acquire(client, channel: str, limits: Sequence[tuple[str, float]]) -> float:
    """Take one turn in each ``(scope, per_second)`` of ``limits``; 0.0, or seconds to wait."""
    if not limits:
        return 0.0
    keys = [f"{PREFIX}{channel}:{scope}" for scope, _ in limits]
    intervals = [f"{1000.0 / rate:.3f}" for _, rate in limits]
    wait_ms = int(client.eval(_ACQUIRE, len(keys), *keys, *intervals))
    return wait_ms / 1000.0
