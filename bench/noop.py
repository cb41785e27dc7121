"""A poller that does nothing: the ``noop`` kind the benchmark schedules.

Loaded by workers through ``NEXOPOLL_EXTRA_POLLERS=bench.noop:NoopPoller``. With
``BENCH_RECORD_TICKS=1`` each tick also appends ``"<job_id> <ctx.now epoch secs>"`` to
the Redis list ``bench:ticks`` (one RPUSH), so the bench can compute scheduling lag
without touching runtime code. ``ctx.now`` is the clock the task read at its start.
"""

from __future__ import annotations

import os

import redis

from nexopoll.core.contract import PollContext, Poller, TickAck

TICKS_KEY = "bench:ticks"

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


class NoopPoller(Poller):
    kind = "noop"
    description = "does nothing; records its start time when BENCH_RECORD_TICKS=1"

    def tick(self, ctx: PollContext) -> TickAck:
        if os.environ.get("BENCH_RECORD_TICKS") == "1":
            _redis().rpush(TICKS_KEY, f"{ctx.job_id} {ctx.now.timestamp():.6f}")
        return TickAck()
