"""One Redis client per process (re-created after fork), for leases and RedBeat sync.

The client is shared by every thread of the process (``-P threads``): redis-py's
client borrows a connection from its pool for each command or pipeline, so threads
never share a socket mid-command; the pool grows to the number of threads in flight.
"""

from __future__ import annotations

import os
import threading

import redis
from django.conf import settings

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
            )
            _pid = os.getpid()
        return _client
