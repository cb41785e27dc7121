"""A client hammering the Redis rate limiter, for tests: as fast as it can, over many
chats of one bot, for a while; every granted turn is stamped with Redis' ``TIME``.

Runs in-process (:func:`burst`) or as its own process, possibly under ``faketime``
(``python -m tests.support.ratelimitburst URL RATE CHATS SECS``: ``go`` when it starts,
then one grant time in Redis milliseconds per line), so two workers whose clocks
differ share one bot.
"""

from __future__ import annotations

import sys
import time

import redis

from nexopoll.runtime import ratelimit


def redis_ms(client: redis.Redis) -> float:
    sec, usec = client.time()
    return sec * 1000 + usec / 1000


def burst(client: redis.Redis, rate: float, chats: int, secs: float) -> list[float]:
    """Take turns for ``secs`` (this process's monotonic clock): bot ``b`` at ``rate``/s,
    chat ``i`` at 1/s; returns the Redis time of each turn granted."""
    granted: list[float] = []
    end = time.monotonic() + secs
    i = 0
    while time.monotonic() < end:
        chat = i % chats
        i += 1
        limits = [("bot:b", rate), (f"chat:b:{chat}", 1.0)]
        if ratelimit.acquire(client, "telegram", limits) == 0:
            granted.append(redis_ms(client))
    return granted


if __name__ == "__main__":
    url, rate, chats, secs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    print("go", flush=True)
    for t in burst(redis.Redis.from_url(url), rate, chats, secs):
        print(f"{t:.3f}")
