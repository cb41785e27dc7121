"""Per-job lease in Redis: ``SET NX PX`` to take it, compare-token Lua to extend or release.

The lease only saves duplicate work; correctness comes from the DB fencing epoch.
A key is never deleted or expired blind: a worker whose lease expired and was
taken over cannot release or extend its successor's lease.

Beside the lease sits the job's crash marker (``nexopoll:running:<job>``): taking the
lease increments it in the same script (one round trip), releasing the lease deletes
it in the same script. So its value, read when the lease is taken, counts the ticks
that started since the last one that ended: ``started - 1`` of them died with their
worker (or their lease expired under them), which is what the poison-tick cap counts.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.commands.core import Script

from .keys import ns

KEY_PREFIX = ns("lease:")  # "nexopoll:lease:" (NEXOPOLL_REDIS_PREFIX)
RUNNING_PREFIX = ns("running:")
RUNNING_TTL_MS = 7 * 24 * 3600 * 1000  # a marker nobody ends is forgotten after a week

# Safe to run twice: redis-py sends a command again when its reply was lost (the
# connection dropped after the request reached Redis). The second run finds the lease
# under its own token and answers what the first did (the marker it incremented: no
# other tick can take the lease, so none can increment it, while the token holds it).
_ACQUIRE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return tonumber(redis.call('get', KEYS[2]) or 1)
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local started = redis.call('incr', KEYS[2])
    redis.call('pexpire', KEYS[2], ARGV[3])
    return started
end
return 0
"""

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[2])
    return redis.call('del', KEYS[1])
end
return 0
"""

# a lease taken and given back before its tick started: that start is not counted
_HAND_BACK = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('del', KEYS[1])
    if redis.call('decr', KEYS[2]) <= 0 then
        redis.call('del', KEYS[2])
    end
    return 1
end
return 0
"""

_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""

_HOLDER = f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Lease:
    job_id: str
    token: str
    ttl_ms: int
    started: int = 1  # ticks started since the last one ended, this one included
    # when the lease was taken (or last extended), on this process's monotonic clock, read
    # before the request left: the lease runs out ``ttl_ms`` after it at the latest
    taken_at: float = field(default_factory=time.monotonic, compare=False)

    @property
    def key(self) -> str:
        return lease_key(self.job_id)

    @property
    def unfinished(self) -> int:
        """Earlier ticks that took the lease and never released it (died, or lost it)."""
        return self.started - 1

    def age_ms(self) -> float:
        """How long ago the lease was taken (or last extended): past ``ttl_ms`` it is gone."""
        return (time.monotonic() - self.taken_at) * 1000

    def deadline(self, share: float) -> float:
        """The monotonic time at which ``share`` of the lease's TTL has run out."""
        return self.taken_at + self.ttl_ms / 1000 * share


def lease_key(job_id: str) -> str:
    return KEY_PREFIX + job_id


def running_key(job_id: str) -> str:
    return RUNNING_PREFIX + job_id


def try_acquire(client: redis.Redis, job_id: str, ttl_ms: int) -> Lease | None:
    """Take the job's lease for ``ttl_ms`` (and count the start on its crash marker), or
    return None when another tick holds it. Safe to retry: a retry after a lost reply
    finds its own token and returns the lease the first attempt took."""
    token = f"{_HOLDER}:{secrets.token_hex(8)}"
    keys = [lease_key(job_id), running_key(job_id)]
    sent = time.monotonic()
    started = int(_script(client, _ACQUIRE)(keys=keys, args=[token, ttl_ms, RUNNING_TTL_MS]))
    if started:
        return Lease(job_id, token, ttl_ms, started, sent)
    return None


def try_acquire_many(client: redis.Redis, wanted: list[tuple[str, int]]) -> dict[str, Lease]:
    """Take the leases of a batch of ``(job_id, ttl_ms)`` in one pipelined round trip;
    return those taken, by job id (a job whose lease another tick holds is left out).
    Safe to retry, as ``try_acquire`` (redis-py re-sends the pipeline after a lost reply)."""
    tokens = [f"{_HOLDER}:{secrets.token_hex(8)}" for _ in wanted]
    calls = [
        ([lease_key(job_id), running_key(job_id)], [token, ttl_ms, RUNNING_TTL_MS])
        for (job_id, ttl_ms), token in zip(wanted, tokens, strict=True)
    ]
    sent = time.monotonic()
    started = run_in_pipeline(client, _ACQUIRE, calls)
    return {
        job_id: Lease(job_id, token, ttl_ms, int(n), sent)
        for (job_id, ttl_ms), token, n in zip(wanted, tokens, started, strict=True)
        if int(n)
    }


def run_in_pipeline(client: redis.Redis, source: str, calls: list[tuple[list, list]]) -> list:
    """Run the script once per ``(keys, args)`` in one pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        queue_script(client, pipe, source, keys, args)
    results = pipe.execute(raise_on_error=False)
    return [
        rerun_if_unloaded(client, source, result, keys, args)
        for result, (keys, args) in zip(results, calls, strict=True)
    ]


def queue_script(client: redis.Redis, pipe: Any, source: str, keys: list, args: list) -> None:
    """Queue the script on ``pipe`` by its SHA alone. (redis-py's ``Script`` on a pipeline
    first asks ``SCRIPT EXISTS``: one more round trip on every execute.) A server that
    does not know the script yet answers NOSCRIPT for that command alone, without
    running it; ``rerun_if_unloaded`` then runs it through ``Script``, which loads it."""
    pipe.evalsha(_script(client, source).sha, len(keys), *keys, *args)


def rerun_if_unloaded(client: redis.Redis, source: str, result: Any, keys: list, args: list):
    """``result`` of a ``queue_script`` call, run again if the server lacked the script."""
    if isinstance(result, redis.exceptions.NoScriptError):
        return _script(client, source)(keys=keys, args=args)
    if isinstance(result, Exception):
        raise result
    return result


def extend(client: redis.Redis, lease: Lease) -> bool:
    """Push the lease's expiry to ``ttl_ms`` from now; False if it is no longer ours."""
    sent = time.monotonic()
    if _script(client, _EXTEND)(keys=[lease.key], args=[lease.token, lease.ttl_ms]):
        lease.taken_at = sent
        return True
    return False


def extend_many(client: redis.Redis, leases: list[Lease]) -> list[bool]:
    """``extend`` each lease, in one pipelined round trip."""
    sent = time.monotonic()
    calls = [([held.key], [held.token, held.ttl_ms]) for held in leases]
    done = [bool(n) for n in run_in_pipeline(client, _EXTEND, calls)]
    for held, ok in zip(leases, done, strict=True):
        if ok:
            held.taken_at = sent
    return done


def holds(client: redis.Redis, lease: Lease) -> bool:
    """Whether the lease is still ours (not expired, not taken over)."""
    return client.get(lease.key) == lease.token


def release(client: redis.Redis, lease: Lease) -> bool:
    """Drop the lease and the crash marker if the lease is still ours; False if it expired
    or was taken over (then both belong to the tick that took it over)."""
    keys = [lease.key, running_key(lease.job_id)]
    return bool(_script(client, _RELEASE)(keys=keys, args=[lease.token]))


def release_in(client: redis.Redis, pipe: redis.client.Pipeline, lease: Lease) -> None:
    """Queue ``release(lease)`` on ``pipe`` (a pipeline of ``client``), by the script's SHA;
    pass its result to ``released`` after the pipeline ran."""
    queue_script(client, pipe, _RELEASE, [lease.key, running_key(lease.job_id)], [lease.token])


def released(client: redis.Redis, lease: Lease, result: Any) -> bool:
    """The outcome of a ``release_in``, released again if the server lacked the script."""
    keys = [lease.key, running_key(lease.job_id)]
    return bool(rerun_if_unloaded(client, _RELEASE, result, keys, [lease.token]))


def hand_back_many(client: redis.Redis, leases: list[Lease]) -> None:
    """Give back leases whose ticks never started (one round trip): each crash marker
    keeps the count it had before the lease was taken."""
    calls = [([held.key, running_key(held.job_id)], [held.token]) for held in leases]
    run_in_pipeline(client, _HAND_BACK, calls)


_scripts: dict[tuple[int, str], Script] = {}


def _script(client: redis.Redis, source: str) -> Script:
    """The script registered on ``client`` (sent by SHA, loaded on first use)."""
    key = (id(client), source)
    script = _scripts.get(key)
    if script is None:
        script = _scripts[key] = client.register_script(source)
    return script


def crashes(row: dict[str, Any], held: Lease | None) -> int:
    """Consecutive ticks of the job that started and never ended (the poison-tick count):
    the crash marker beside the lease, or a ``running_since`` left by a take-epoch tick."""
    if held is None:
        return 0
    from_db = row["crash_count"] + 1 if row["running_since"] is not None else 0
    return max(held.unfinished, from_db)
