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

With Redis Sentinel configured (``settings.NEXOPOLL_REDIS_SENTINEL``) the client is a
``Sentinel(...).master_for(...)`` one: every new connection asks the sentinels for the
current master, and connections to a demoted or dead master are dropped, so a failover
costs the commands in flight one retry. ``new_client`` is the one factory: nothing else
in nexopoll builds a Redis client from ``REDIS_URL``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
import redis.sentinel
from django.conf import settings
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

# A failover takes the sentinels a second or more (down-after-milliseconds + election):
# retry a dropped connection over a few seconds, not only 0.1 s, when Sentinel is on.
RETRY = Retry(ExponentialBackoff(cap=0.5, base=0.05), 2, (redis.exceptions.ConnectionError,))
SENTINEL_RETRY = Retry(
    ExponentialBackoff(cap=1.0, base=0.1), 6, (redis.exceptions.ConnectionError,)
)

_client: redis.Redis | None = None
_sentinel: redis.sentinel.Sentinel | None = None
_pid: int | None = None
_lock = threading.Lock()

DEFAULTS: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": 10,
    "socket_connect_timeout": 5,
    "health_check_interval": 10,
}


def make_sentinel() -> redis.sentinel.Sentinel:
    conf = settings.NEXOPOLL_REDIS_SENTINEL
    return redis.sentinel.Sentinel(conf.sentinels, sentinel_kwargs=conf.sentinel_kwargs())


def new_client(sentinel: redis.sentinel.Sentinel | None = None, **options: Any) -> redis.Redis:
    """A new client on the configured Redis (the current master under Sentinel)."""
    conf = settings.NEXOPOLL_REDIS_SENTINEL
    if conf is None:
        return redis.Redis.from_url(settings.REDIS_URL, **{**DEFAULTS, **options})
    options.setdefault("retry", SENTINEL_RETRY)
    return (sentinel or make_sentinel()).master_for(
        conf.master, redis_class=redis.Redis, **{**DEFAULTS, **conf.master_kwargs(), **options}
    )


def get_redis() -> redis.Redis:
    global _client, _pid, _sentinel
    client = _client
    if client is not None and _pid == os.getpid():
        return client
    with _lock:  # two threads meeting no client make one, not two pools
        if _client is None or _pid != os.getpid():
            _sentinel = make_sentinel() if settings.NEXOPOLL_REDIS_SENTINEL else None
            _client = new_client(_sentinel) if _sentinel else new_client(retry=RETRY)
            _pid = os.getpid()
        return _client


def get_sentinel() -> redis.sentinel.Sentinel | None:
    """The sentinels behind ``get_redis()`` (``None`` without Sentinel)."""
    get_redis()
    return _sentinel


def pin_redbeat_client(app: Any) -> redis.Redis:
    """RedBeat's client for ``app``, made to last: under Sentinel, RedBeat's ``get_redis``
    builds a new ``master_for`` client (a new pool, new connections) on every call, each
    entry it reads included. That client already follows failovers: keep the first one
    for every later call."""
    from redbeat.schedulers import REDBEAT_SENTINEL_KEY
    from redbeat.schedulers import get_redis as redbeat_redis

    client = redbeat_redis(app)
    if hasattr(app, REDBEAT_SENTINEL_KEY):
        delattr(app, REDBEAT_SENTINEL_KEY)  # get_redis() now returns the client it stored
    return client
