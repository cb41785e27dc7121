"""One Redis client per process (re-created after fork), for leases and RedBeat sync."""

from __future__ import annotations

import os

import redis
from django.conf import settings

_client: redis.Redis | None = None
_pid: int | None = None


def get_redis() -> redis.Redis:
    global _client, _pid
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
