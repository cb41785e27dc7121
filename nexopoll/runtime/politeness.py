"""Per-host politeness across every worker (Redis): requests in flight to one host at
once, and requests per second to it.

A tick's fetches go through :func:`gate` (set for the poller's call, see
``tick._call_poller``): before each request the worker takes a turn on the host, in one
Lua script that drops holders past their lease (a worker that died mid-request), then
admits the request if fewer than ``in_flight`` hold the host and fewer than ``per_sec``
started in this second (Redis's own clock, so worker clocks do not matter). The set
of holders expires with its longest lease (never shortened by a holder with a short
budget, which would erase the turns of long-running requests). A request
that finds the host busy waits (polling every few ms, within the fetch's deadline):
that is lag, not an error; only a deadline that runs out fails the fetch, as a slow
host would. The turn ends when the response was read; within a scheduled tick
(``deferring``), in the tick's closing round trip instead (with its lease and history),
a few milliseconds later, which saves a Redis round trip per request.

Defaults: ``NEXOPOLL_HOST_MAX_IN_FLIGHT`` (16) and ``NEXOPOLL_HOST_MAX_PER_SEC`` (0:
no cap); a job's ``host_limits: {in_flight: N, per_sec: N}`` overrides them for its
own requests (0: no cap).
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from . import hostwait
from .keys import ns
from .lease import _script
from .redis import get_redis

PREFIX = ns("host:")  # "nexopoll:host:" (NEXOPOLL_REDIS_PREFIX)
_WAIT_MIN, _WAIT_MAX = 0.005, 0.1  # seconds between tries while the host is busy

# KEYS: in-flight zset, rate key prefix. ARGV: token, lease ms, in_flight cap, per_sec cap,
# then the caller's own earlier turns on this host to end first (deferred releases)
_TAKE = """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap, rate = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, #ARGV do redis.call('zrem', KEYS[1], ARGV[i]) end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
-- a retry after a lost reply (redis.py) finds the turn it took: it is ours
if cap > 0 and redis.call('zscore', KEYS[1], ARGV[1]) then return 1 end
if cap > 0 and redis.call('zcard', KEYS[1]) >= cap then return 0 end
local second = KEYS[2] .. t[1]
if rate > 0 then
    if tonumber(redis.call('get', second) or '0') >= rate then return 0 end
    redis.call('incr', second)
    redis.call('pexpire', second, 2000)
end
if cap > 0 then
    redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
    -- the set lives as long as its longest lease: a short one never cuts the others'
    local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores')
    redis.call('pexpireat', KEYS[1], math.ceil(tonumber(last[2])))
end
return 1
"""


def limits(override: dict[str, int] | None) -> tuple[int, int]:
    """(in_flight, per_sec) for a job: its override, else the defaults (0: no cap)."""
    o = override or {}
    in_flight = o.get("in_flight", settings.NEXOPOLL_HOST_MAX_IN_FLIGHT)
    per_sec = o.get("per_sec", settings.NEXOPOLL_HOST_MAX_PER_SEC)
    return int(in_flight), int(per_sec)


def gate_for(override: dict[str, int] | None, job_id: str = ""):
    """A ``nexopoll.net.transport.HostGate`` with a job's caps, or None when uncapped
    (``job_id``: whose page notes a wait for a turn, see ``hostwait``)."""
    in_flight, per_sec = limits(override)
    if in_flight <= 0 and per_sec <= 0:
        return None

    def gate(host: str, budget: Any) -> contextlib.AbstractContextManager[None]:
        return turn(host, budget, in_flight=in_flight, per_sec=per_sec, job_id=job_id)

    return gate


@contextlib.contextmanager
def turn(
    host: str, budget: Any, *, in_flight: int, per_sec: int, job_id: str = ""
) -> Iterator[None]:
    """Hold one of ``host``'s turns for the block; wait for it within ``budget``. A wait
    is counted (``hostwait.record``: by host, and as the job's latest wait)."""
    client = get_redis()
    key = PREFIX + host
    token = secrets.token_hex(8)
    # a holder that died keeps its turn until the longest a request may take
    lease_ms = int(max(budget.remaining(), 1.0) * 1000) + 1000
    wait = _WAIT_MIN
    take = _script(client, _TAKE)
    waited_since = None
    deferred = _deferred.get()
    job_id = job_id or _job.get()
    mine = [t for k, t in deferred if k == key] if deferred else []
    if mine:  # this tick's earlier turns on the host end as this one is taken
        deferred[:] = [(k, t) for k, t in deferred if k != key]
    try:
        while not take(keys=[key, key + ":s:"], args=[token, lease_ms, in_flight, per_sec, *mine]):
            mine = []
            if waited_since is None:
                waited_since = time.monotonic()
            left = budget.check()  # raises when the deadline passed or the tick was cancelled
            time.sleep(min(wait, left))
            wait = min(wait * 2, _WAIT_MAX)
    finally:
        if waited_since is not None:  # granted, or the deadline ran out while waiting
            hostwait.record(
                client, host, time.monotonic() - waited_since, job_id=job_id, cap=in_flight
            )
    try:
        yield
    finally:
        if in_flight > 0:
            if deferred is not None:  # ended in the tick's closing round trip
                deferred.append((key, token))
            else:
                try:
                    client.zrem(key, token)
                except Exception:  # the turn expires with its lease
                    pass


_deferred: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "nexopoll_deferred_host_turns", default=None
)


_job: contextvars.ContextVar[str] = contextvars.ContextVar("nexopoll_turn_job", default="")


@contextlib.contextmanager
def deferring(job_id: str = "") -> Iterator[list[tuple[str, str]]]:
    """The scope of one scheduled tick of ``job_id`` (the job a wait is noted for).

    Within the block, a turn whose request finished is not ended at once (one Redis
    round trip per request) but kept in the yielded list, for the caller to end in a round
    trip it makes anyway (``queue_releases``: a tick's closing pipeline, which releases its
    lease). Whatever is left at the end of the block is ended then. The turns of one host
    taken again in the block end as the new one is taken (never waiting on oneself)."""
    pending: list[tuple[str, str]] = []
    reset, reset_job = _deferred.set(pending), _job.set(job_id)
    try:
        yield pending
    finally:
        _deferred.reset(reset)
        _job.reset(reset_job)
        if pending:
            try:
                pipe = get_redis().pipeline(transaction=False)
                queue_releases(pipe, pending)
                pipe.execute()
            except Exception:  # the turns expire with their leases
                pass


def queue_releases(pipe: Any, pending: list[tuple[str, str]] | None = None) -> None:
    """Queue the end of the ``pending`` turns (default: those of the current
    ``deferring`` block, if any) on ``pipe``, and forget them."""
    if pending is None:
        pending = _deferred.get()
        if not pending:
            return
    for key, token in pending:
        pipe.zrem(key, token)
    pending.clear()
