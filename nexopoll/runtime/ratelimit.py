"""Provider rate limits held across every worker process and machine, in Redis.

Each scope (``telegram:bot:ana_bot``, ``telegram:chat:ana_bot:42``…) is a GCRA
slot: Redis keeps the scope's "next allowed" time, in milliseconds of the Redis
server's own clock (``TIME``), so worker clocks never matter. :func:`acquire`
takes a turn in every scope of a message at once or in none: it returns 0 when the
message may go now (the turns are taken), else the seconds until it may. Turns are
spaced evenly (``1 / rate`` apart, no burst), so no second ever holds more than
``rate`` sends of one scope (one more at most where a second's edge splits a turn).

Times are kept in fractional milliseconds (a rate of 30/s is 33.333… ms apart), but
a Lua number reply reaches the client as an integer, truncated: the script returns
the wait in whole milliseconds, rounded up, so a wait under 1 ms is 1 ms, never 0
(a 0 means the turns were taken).
"""

from __future__ import annotations

from collections.abc import Sequence

from .keys import ns

PREFIX = ns("rate:")  # "nexopoll:rate:" (NEXOPOLL_REDIS_PREFIX)

_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  if tat - now > wait then wait = tat - now end
end
-- a reply is truncated to an integer: round up, so a wait is never 0
if wait > 0 then return math.ceil(wait) end
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[i])
  local next_turn = string.format('%.3f', tats[i] + interval)
  redis.call('SET', key, next_turn, 'PX', math.ceil(interval) + 1000)
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
