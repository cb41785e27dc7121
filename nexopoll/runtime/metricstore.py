"""Cluster-wide Prometheus counters, kept in Redis (rendered by ``nexopoll.metrics``).

Every worker process, prefork child and machine adds to the same Redis hashes,
so one scrape of the web process sees the totals of the whole cluster. A
per-process ``prometheus_client`` registry behind one port would show whichever
child answered. The writes ride on pipelines that already exist:

- a tick queues its increments on the pipeline that releases its lease and
  appends its history entry (``history.record``): no extra round trip;
- a delivery batch writes its outcomes in one pipeline per batch;
- beat queues its dispatch lag on the pipeline that stores the next slots;
- ``host.metric_inc`` counts in memory during the tick and is flushed with it.

Gauges that are state (consecutive errors, breaker, outbox sizes) are read from
the DB at scrape time instead: the DB owns that state and a reset or a pause
changes it without any tick. Redis is not the source of truth: a flushed Redis
restarts the counters from zero, which Prometheus reads as a counter reset.

Layout (hashes under ``nexopoll:metrics:``; ``SEP`` joins label values):

=====================  ======================================  =====================
key                    field                                    value
=====================  ======================================  =====================
``ticks``              ``job_id SEP status``                    ticks
``seen``/``dispatched``  ``job_id``                             items
``latency``            ``job_id SEP i`` (bucket i), ``SEP sum``  ticks, total ms
``takeovers``          ``job_id``                               takeovers
``deliveries``         ``channel SEP status``                   attempts' outcomes
``beat_lag``           ``i`` (bucket i), ``sum`` (ms)           dispatches
``poller``             JSON ``[job_id, name, [[k, v], …]]``     increments
``poller_dropped``     JSON ``[job_id, name]``                  increments refused
``poller_card``        JSON ``[job_id]``, ``[job_id, name]``,   series / values
                       ``[job_id, name, label]``                counted
``poller_values``      JSON ``[job_id, name, label, value]``    1 (a value in use)
``host_wait``          ``host SEP i`` (bucket i), ``SEP sum``   waits, total ms
=====================  ======================================  =====================

``host_wait`` (and the job notes beside it) is written by ``runtime/hostwait.py``.

A poller's own series are capped where they are written (one Lua script per tick that
counted any, on the same pipeline): a new series is refused when its job already has
``NEXOPOLL_METRICS_MAX_SERIES_PER_JOB`` of them, or when one of its label values would
be the ``NEXOPOLL_METRICS_MAX_LABEL_VALUES``-plus-first of that label for that job and
metric. The refused increments are counted in ``poller_dropped`` (under the metric's
name, or ``*`` for a name the job had no series of yet, so the drops stay bounded too).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nexopoll.core import metricrules

from .keys import ns

log = logging.getLogger("nexopoll.metrics")

PREFIX = ns("metrics:")  # "nexopoll:metrics:" (NEXOPOLL_REDIS_PREFIX)
SEP = "\x1f"
TICKS = PREFIX + "ticks"
SEEN = PREFIX + "seen"
DISPATCHED = PREFIX + "dispatched"
LATENCY = PREFIX + "latency"
TAKEOVERS = PREFIX + "takeovers"
DELIVERIES = PREFIX + "deliveries"
BEAT_LAG = PREFIX + "beat_lag"
POLLER = PREFIX + "poller"
POLLER_DROPPED = PREFIX + "poller_dropped"
POLLER_CARD = PREFIX + "poller_card"
POLLER_VALUES = PREFIX + "poller_values"
#: what a scrape reads (the cap's bookkeeping, POLLER_CARD and POLLER_VALUES, it does not)
HOST_WAIT = PREFIX + "host_wait"  # written by runtime/hostwait.py, with these two:
HOST_WAIT_HOSTS = PREFIX + "host_wait_hosts"
HOST_WAIT_JOBS = PREFIX + "host_wait_jobs"
ALL_KEYS = (
    TICKS,
    SEEN,
    DISPATCHED,
    LATENCY,
    TAKEOVERS,
    DELIVERIES,
    BEAT_LAG,
    POLLER,
    POLLER_DROPPED,
    HOST_WAIT,
)

#: ``poller_latency_ms`` bucket bounds (ms); index ``len(...)`` is +Inf
LATENCY_BUCKETS_MS = (10, 25, 50, 100, 250, 500, 1000, 5000, 30_000)
#: beat dispatch lag bucket bounds (seconds)
LAG_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TICK_STATUSES = ("ok", "transient", "permanent", "skipped")


def enabled() -> bool:
    from django.conf import settings

    return settings.NEXOPOLL_METRICS


def bucket(value: float, bounds: tuple[float, ...]) -> int:
    """The index of the first bound ``>= value`` (``len(bounds)`` for +Inf)."""
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


def tick_status(status: str) -> str:
    """A tick's label: ``fenced`` (ran, committed nothing) counts as ``skipped``."""
    return status if status in TICK_STATUSES else "skipped"


def queue_tick(
    pipe: Any,
    job_id: str,
    *,
    status: str,
    ms: int | None,
    seen: int = 0,
    dispatched: int = 0,
    takeover: bool = False,
    poller: Mapping[tuple[str, tuple], int] | None = None,
) -> None:
    """Queue one tick's increments on ``pipe`` (the tick's own release pipeline)."""
    pipe.hincrby(TICKS, f"{job_id}{SEP}{tick_status(status)}", 1)
    pipe.hincrby(SEEN, job_id, int(seen))
    pipe.hincrby(DISPATCHED, job_id, int(dispatched))
    if ms is not None:
        pipe.hincrby(LATENCY, f"{job_id}{SEP}{bucket(ms, LATENCY_BUCKETS_MS)}", 1)
        pipe.hincrby(LATENCY, f"{job_id}{SEP}sum", int(ms))
    if takeover:
        pipe.hincrby(TAKEOVERS, job_id, 1)
    if poller:
        queue_poller(pipe, job_id, poller)


def poller_key(
    name: str, labels: Mapping[str, Any], secrets: Iterable[str] = ()
) -> tuple[str, tuple]:
    """A ``metric_inc(name, **labels)`` call as a hashable key: names checked (ConfigError),
    values masked and cut (``nexopoll.core.metricrules.series``)."""
    return metricrules.series(name, labels, secrets)


def poller_field(job_id: str, name: str, labels: Iterable[tuple[str, str]]) -> str:
    return _json([job_id, name, [list(kv) for kv in labels]])


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# KEYS: POLLER, POLLER_DROPPED, POLLER_VALUES, POLLER_CARD.
# ARGV: max values per label, max series per job, the job's field ([job_id]), its drop
# field for new names ([job_id, "*"]), then per series: its field, increment, its
# metric's field ([job_id, name]), label count, then (card field, values field) per
# label. A known series is incremented; a new one only if its job and each of its labels
# are under their caps, else its increment is counted as dropped.
_CAP_SCRIPT = """
local max_values, max_series, job = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local i = 5
while i <= #ARGV do
  local field, n, metric = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local first = i + 4
  local last = first + 2 * tonumber(ARGV[i + 3]) - 1
  if redis.call('HEXISTS', KEYS[1], field) == 1 then
    redis.call('HINCRBY', KEYS[1], field, n)
  else
    local ok = tonumber(redis.call('HGET', KEYS[4], job) or '0') < max_series
    for j = first, last, 2 do
      if ok and redis.call('HEXISTS', KEYS[3], ARGV[j + 1]) == 0
         and tonumber(redis.call('HGET', KEYS[4], ARGV[j]) or '0') >= max_values then
        ok = false
      end
    end
    if ok then
      for j = first, last, 2 do
        if redis.call('HSETNX', KEYS[3], ARGV[j + 1], 1) == 1 then
          redis.call('HINCRBY', KEYS[4], ARGV[j], 1)
        end
      end
      redis.call('HINCRBY', KEYS[4], job, 1)
      redis.call('HINCRBY', KEYS[4], metric, 1)
      redis.call('HINCRBY', KEYS[1], field, n)
    elseif redis.call('HEXISTS', KEYS[4], metric) == 1 then
      redis.call('HINCRBY', KEYS[2], metric, n)
    else
      redis.call('HINCRBY', KEYS[2], ARGV[4], n)
    end
  end
  i = last + 1
end
return 0
"""


def limits() -> tuple[int, int]:
    """``(values per label per job and metric, series per job)`` for a poller's own metrics."""
    from django.conf import settings

    return (
        settings.NEXOPOLL_METRICS_MAX_LABEL_VALUES,
        settings.NEXOPOLL_METRICS_MAX_SERIES_PER_JOB,
    )


def queue_poller(pipe: Any, job_id: str, counts: Mapping[tuple[str, tuple], int]) -> None:
    """Queue a tick's ``metric_inc`` counts on ``pipe``: one script that applies the caps."""
    max_values, max_series = limits()
    args: list[Any] = [max_values, max_series, _json([job_id]), _json([job_id, "*"])]
    for (name, labels), n in counts.items():
        args += [poller_field(job_id, name, labels), int(n), _json([job_id, name]), len(labels)]
        for label, value in labels:
            args += [_json([job_id, name, label]), _json([job_id, name, label, value])]
    keys = (POLLER, POLLER_DROPPED, POLLER_VALUES, POLLER_CARD)
    pipe.eval(_CAP_SCRIPT, len(keys), *keys, *args)


def queue_deliveries(pipe: Any, outcomes: Iterable[tuple[str, str]]) -> None:
    """Queue ``(channel, outcome)`` counts (sent, retry, dead, held) on ``pipe``."""
    counts: dict[str, int] = {}
    for channel, outcome in outcomes:
        field = f"{channel}{SEP}{outcome}"
        counts[field] = counts.get(field, 0) + 1
    for field, n in counts.items():
        pipe.hincrby(DELIVERIES, field, n)


def queue_beat_lag(pipe: Any, lags_s: Iterable[float]) -> None:
    """Queue beat's dispatch lags (seconds past each entry's due time) on ``pipe``."""
    if not enabled():
        return
    counts: dict[int, int] = {}
    total_ms = 0
    for lag in lags_s:
        lag = max(lag, 0.0)
        i = bucket(lag, LAG_BUCKETS_S)
        counts[i] = counts.get(i, 0) + 1
        total_ms += round(lag * 1000)
    if not counts:
        return
    for i, n in counts.items():
        pipe.hincrby(BEAT_LAG, str(i), n)
    pipe.hincrby(BEAT_LAG, "sum", total_ms)


def record_deliveries(client: Any, outcomes: Iterable[tuple[str, str]]) -> None:
    """One round trip with a batch's delivery outcomes; a Redis error is logged, not raised."""
    outcomes = list(outcomes)
    if not outcomes:
        return
    try:
        pipe = client.pipeline(transaction=False)
        queue_deliveries(pipe, outcomes)
        pipe.execute()
    except Exception as exc:  # metrics never fail a delivery
        log.warning("metrics.deliveries_not_recorded: %s", type(exc).__name__)


def clear(client: Any) -> None:
    client.delete(*ALL_KEYS, POLLER_CARD, POLLER_VALUES, HOST_WAIT_HOSTS, HOST_WAIT_JOBS)


def tick_writer(report: Any) -> Any:
    """What ``history.record`` calls to queue a ``TickReport``'s increments (None: metrics
    off). It never raises: a metrics bug must not keep the pipeline from releasing the lease."""
    if not enabled():
        return None

    def write(pipe: Any) -> None:
        try:
            queue_tick(
                pipe,
                report.job_id,
                status=report.status,
                ms=report.latency_ms,
                seen=report.items_seen,
                dispatched=report.items_dispatched,
                takeover=report.takeover,
                poller=report.poller_metrics,
            )
        except Exception:
            log.warning("metrics.tick_not_recorded job=%s", report.job_id, exc_info=True)

    return write


COUNTED_OUTCOMES = ("sent", "retry", "dead", "held")


def record_outcomes(outcomes: Mapping[str, str]) -> None:
    """Count a delivery batch's outcomes by channel (one DB read, one Redis round trip)."""
    from ..models import Delivery
    from .redis import get_redis

    counted = {i: o for i, o in outcomes.items() if o in COUNTED_OUTCOMES}
    if not counted or not enabled():
        return
    channels = dict(Delivery.objects.filter(id__in=list(counted)).values_list("id", "channel"))
    pairs = [(channels[k], counted[str(k)]) for k in channels if str(k) in counted]
    record_deliveries(get_redis(), pairs)


def queue_skipped(pipe: Any, job_ids: Iterable[str]) -> None:
    """Queue ``count_skipped`` for each of ``job_ids`` on ``pipe`` (a batch of ticks)."""
    if enabled():
        for job_id in job_ids:
            pipe.hincrby(TICKS, f"{job_id}{SEP}skipped", 1)


def count_skipped(job_id: str) -> None:
    """A tick that found the lease busy (it writes no history): one HINCRBY of its own."""
    from .redis import get_redis

    if not enabled():
        return
    try:
        get_redis().hincrby(TICKS, f"{job_id}{SEP}skipped", 1)
    except Exception as exc:  # metrics never fail a tick
        log.warning("metrics.skip_not_recorded job=%s: %s", job_id, type(exc).__name__)
