"""A fixed-window request counter in Redis, shared by every web process (the JSON API's
rate limit): :func:`hit` counts one request of a client in the current minute."""

from __future__ import annotations

import logging
import time

from nexopoll.runtime.keys import ns
from nexopoll.runtime.redis import get_redis

log = logging.getLogger("nexopoll.api")

RATE_PREFIX = ns("api:rate:")  # "nexopoll:api:rate:" (NEXOPOLL_REDIS_PREFIX)


def hit(client: str) -> int | None:
    """Count one request of ``client`` in this minute: the count so far, or None when
    Redis cannot count (a rate limiter never takes the API down with Redis)."""
    key = f"{RATE_PREFIX}{client}:{int(time.time() // 60)}"
    try:
        pipe = get_redis().pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, 120)
        return int(pipe.execute()[0])
    except Exception as exc:
        log.warning("api.rate_limit_unavailable: %s", type(exc).__name__)
        return None
