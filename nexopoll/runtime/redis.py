"""One Redis client per process (re-created after fork), for leases and RedBeat sync.

The client is shared by every thread of the process (``-P threads``): redis-py's
client borrows a connection from its pool for each command or pipeline, so threads
never share a socket mid-command; the pool grows to the number of threads in flight.

A command whose connection drops is sent again on a new one (``RETRY``), as redis-py's
own ``Redis()`` does by default (``from_url`` sets no retry). The reply may have been
lost after Redis ran the command, so every script the runtime sends must be safe to run
twice: taking a lease recognises its own token (``lease.py``); releasing, extending and
handing back compare the token. A tick's history entry and metric counts may be
recorded twice then (never lost). Timeouts are not retried (a stalled Redis would hold
the tick for several socket timeouts).
"""

from __future__ import annotations

import os
import threading

import redis
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

RETRY = Retry(ExponentialBackoff(cap=0.5, base=0.05), 2, (redis.exceptions.ConnectionError,))

_client: redis.Redis | None = None
_pid: int | None = None
_lock = threading.Lock()


def get_redis() -> redis.Redis:
    global _client, _pid
    client = _client
    if client is not None and _pid == os.getpid():
        return client
    with _lock:  # two threads meeting no client make one, not two pools
        if _client is None or _pid != os.getpid():
            _client = redis.Redis.from_url(
                settings.REDIS_URL,
                decode_responses=True,
                socket_timeout=10,
                socket_connect_timeout=5,
                health_check_interval=10,
                retry=RETRY,
            )
            _pid = os.getpid()
        return _client
