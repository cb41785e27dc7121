"""Time spent waiting for a host turn (per-host politeness, ``politeness.turn``), made
visible: a cluster-wide histogram by host, and the last wait of each job for its page.

A request that finds its host at its cap (in flight or per second) waits for a turn:
lag, not an error (issue 19). One host's ceiling is its in-flight cap divided by the
request latency (16 / 0.2 s = 80 requests/s): past it, ticks queue behind each other and
an operator only saw lag. Now a request that waited writes, in one Redis round trip
(only a request that waited pays it, and it already made several while polling):

- ``nexopoll:metrics:host_wait`` (hash): ``host SEP i`` (bucket i of WAIT_BUCKETS_S),
  ``host SEP sum`` (ms): ``poller_host_wait_seconds{host}`` at scrape time. Hosts are
  capped at ``NEXOPOLL_METRICS_MAX_LABEL_VALUES`` (the set ``host_wait_hosts`` holds
  the ones admitted); the waits of any further host count under ``host="_other"``.
- ``nexopoll:metrics:host_wait_jobs`` (hash): ``job_id`` → JSON ``[host, at, ms, cap]``,
  the job's latest wait, shown as a note on its admin page.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .metricstore import HOST_WAIT, SEP, bucket, enabled
from .metricstore import HOST_WAIT_HOSTS as HOSTS
from .metricstore import HOST_WAIT_JOBS as JOBS

log = logging.getLogger("nexopoll.politeness")

OTHER = "_other"
#: ``poller_host_wait_seconds`` bucket bounds (seconds); index ``len(...)`` is +Inf
WAIT_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# KEYS: HOST_WAIT, HOSTS, JOBS. ARGV: host, max hosts, bucket index, ms, job id, note.
_RECORD = (
    """
local host = ARGV[1]
if redis.call('SISMEMBER', KEYS[2], host) == 0 then
  if redis.call('SCARD', KEYS[2]) < tonumber(ARGV[2]) then
    redis.call('SADD', KEYS[2], host)
  else
    host = '"""
    + OTHER
    + """'
  end
end
redis.call('HINCRBY', KEYS[1], host .. '"""
    + SEP
    + """' .. ARGV[3], 1)
redis.call('HINCRBY', KEYS[1], host .. '"""
    + SEP
    + """sum', tonumber(ARGV[4]))
if ARGV[5] ~= '' then redis.call('HSET', KEYS[3], ARGV[5], ARGV[6]) end
return 0
"""
)


def record(client: Any, host: str, waited_s: float, *, job_id: str = "", cap: int = 0) -> None:
    """Count one request's wait for a turn on ``host`` (never raises: metrics never fail
    a request)."""
    if not enabled():
        return
    from django.conf import settings

    ms = round(max(waited_s, 0.0) * 1000)
    note = json.dumps([host, round(time.time(), 3), ms, cap], separators=(",", ":"))
    try:
        client.eval(
            _RECORD,
            3,
            HOST_WAIT,
            HOSTS,
            JOBS,
            host[:255],
            settings.NEXOPOLL_METRICS_MAX_LABEL_VALUES,
            bucket(waited_s, WAIT_BUCKETS_S),
            ms,
            job_id,
            note,
        )
    except Exception as exc:
        log.warning("metrics.host_wait_not_recorded host=%s: %s", host, type(exc).__name__)


def last_wait(client: Any, job_id: str) -> dict[str, Any] | None:
    """The job's latest wait for a host turn: ``{host, at (epoch s), ms, cap}``, or None."""
    try:
        raw = client.hget(JOBS, job_id)
        if not raw:
            return None
        host, at, ms, cap = json.loads(raw)
        return {"host": str(host), "at": float(at), "ms": int(ms), "cap": int(cap)}
    except Exception:  # an unreadable note (or Redis down) shows no note
        return None
