"""Per-job lease in Redis: ``SET NX PX`` to take it, compare-token Lua to extend or release.

The lease only saves duplicate work; correctness comes from the DB fencing epoch.
A key is never deleted or expired blind: a worker whose lease expired and was
taken over cannot release or extend its successor's lease.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

import redis
from redis.commands.core import Script

KEY_PREFIX = "nexopoll:lease:"

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
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


@dataclass(frozen=True)
class Lease:
    job_id: str
    token: str
    ttl_ms: int

    @property
    def key(self) -> str:
        return lease_key(self.job_id)


def lease_key(job_id: str) -> str:
    return KEY_PREFIX + job_id


def try_acquire(client: redis.Redis, job_id: str, ttl_ms: int) -> Lease | None:
    """Take the job's lease for ``ttl_ms``, or return None when another tick holds it."""
    token = f"{_HOLDER}:{secrets.token_hex(8)}"
    if client.set(lease_key(job_id), token, nx=True, px=ttl_ms):
        return Lease(job_id, token, ttl_ms)
    return None


def extend(client: redis.Redis, lease: Lease) -> bool:
    """Push the lease's expiry to ``ttl_ms`` from now; False if it is no longer ours."""
    return bool(_script(client, _EXTEND)(keys=[lease.key], args=[lease.token, lease.ttl_ms]))


def release(client: redis.Redis, lease: Lease) -> bool:
    """Drop the lease if it is still ours; False if it expired or was taken over."""
    return bool(_script(client, _RELEASE)(keys=[lease.key], args=[lease.token]))


def release_in(client: redis.Redis, pipe: redis.client.Pipeline, lease: Lease) -> None:
    """Queue ``release(lease)`` on ``pipe`` (a pipeline of ``client``), by the script's SHA."""
    _script(client, _RELEASE)(keys=[lease.key], args=[lease.token], client=pipe)


_scripts: dict[tuple[int, str], Script] = {}


def _script(client: redis.Redis, source: str) -> Script:
    """The script registered on ``client`` (sent by SHA, loaded on first use)."""
    key = (id(client), source)
    script = _scripts.get(key)
    if script is None:
        script = _scripts[key] = client.register_script(source)
    return script
