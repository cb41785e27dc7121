"""``/metrics``: Prometheus exposition of the whole cluster, from one scrape of the web process.

Counters and histograms come from the Redis hashes every worker writes
(:mod:`nexopoll.runtime.metricstore`); state gauges (consecutive errors, breaker,
outbox sizes) are read from the DB at scrape time; the beat lock from Redis.
Two reads per scrape, whatever the number of workers: one Redis pipeline and
three DB queries.

Series (the seeds' seven first):

- ``poller_ticks_total{kind,agent,job_id,status}`` (status ok|transient|permanent|skipped)
- ``poller_latency_ms{kind,job_id}`` (histogram, ms)
- ``poller_items_seen_total{kind,job_id}``, ``poller_items_dispatched_total{kind,job_id}``
- ``poller_consecutive_errors{job_id}``, ``poller_breaker_state{job_id}`` (0 closed,
  1 half-open, 2 open), ``poller_lease_takeovers_total{job_id}``
- ``poller_deliveries_total{channel,status}`` (sent|retry|dead|held), ``poller_outbox_rows
  {status}`` (pending|held|dead), ``poller_beat_dispatch_lag_seconds`` (histogram),
  ``poller_beat_lock_held``, ``poller_metric_total{job_id,kind,name,…}`` (``metric_inc``),
  ``poller_metrics_store_up`` (0 when Redis did not answer this scrape),
  ``nexopoll_metric_series_dropped_total{job_id,metric}`` (``metric_inc`` increments past
  the cardinality caps), ``nexopoll_metric_series_skipped{reason}`` (stored series this
  scrape left out: see :mod:`nexopoll.metricspoller`)

A stored field that cannot be read (not a number, a bad name) costs its own series,
counted as skipped, never the scrape. The text is written by :mod:`nexopoll.metricstext`.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from itertools import accumulate
from typing import Any

import redis
from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from . import metricspoller, metricstext
from .core.breaker import BREAKER_LABELS, breaker_label
from .metricspoller import as_int
from .metricstext import Family
from .models import Delivery, PollJob, PollState
from .runtime import hostwait, logredact
from .runtime import metricstore as ms
from .runtime.redis import new_client

log = logging.getLogger("nexopoll.metrics")

# the text format every Prometheus reads
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _split(field: str) -> tuple[str, str]:
    head, _, tail = field.rpartition(ms.SEP)
    return head, tail


def _buckets(counts: dict[int, int], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    les = _les(bounds)
    return list(zip(les, accumulate(counts.get(i, 0) for i in range(len(les))), strict=True))


@functools.cache
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    return (*(str(float(bound)) for bound in bounds), "+Inf")


_clients: dict[tuple[str, int], redis.Redis] = {}

# Every hash of the scrape (and the beat lock) as one JSON string: a 10,000-job cluster
# has ~150,000 fields, which redis-py's reply parser reads one by one (0.3 s of CPU);
# one string for json.loads costs a tenth of that. Redis runs it in about the time of
# the HGETALLs themselves.
_READ_SCRIPT = """
local out = {}
for i = 1, #KEYS - 1 do out[i] = redis.call('HGETALL', KEYS[i]) end
out[#KEYS] = redis.call('EXISTS', KEYS[#KEYS])
return cjson.encode(out)
"""


def _scrape_redis() -> redis.Redis:
    """A client that reads bytes that are no UTF-8 as U+FFFD (a field written by hand or
    by another program costs its own series, not the whole Redis read)."""
    key = (settings.REDIS_URL, os.getpid())
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = new_client(encoding_errors="replace", health_check_interval=0)
    return client


class ClusterCollector:
    """The scrape's families, from Redis and the DB (nothing per process)."""

    def __init__(self) -> None:
        self.skipped: Counter = Counter()  # stored series left out, by reason

    def collect(self) -> list[Family]:
        jobs = {j: (k, a) for j, k, a in PollJob.objects.values_list("job_id", "kind", "agent")}
        redis_data = self._read_redis()
        up = Family(
            "poller_metrics_store_up",
            "gauge",
            "1 when Redis (the counter store) answered this scrape",
        )
        up.add([], 1 if redis_data is not None else 0)
        out = [up]
        if redis_data is not None:
            out += self._counters(redis_data, jobs)
        out += self._state(jobs)
        out.append(metricspoller.skipped_family(self.skipped))
        return out

    # --- Redis ---------------------------------------------------------------
    @staticmethod
    def _read_redis() -> dict[str, Any] | None:
        keys = [*ms.ALL_KEYS, settings.CELERY_REDBEAT_KEY_PREFIX + ":lock"]
        try:
            raw = _scrape_redis().eval(_READ_SCRIPT, len(keys), *keys)
            *hashes, lock = json.loads(raw)
        except Exception as exc:  # the DB-side series still render
            log.warning("metrics.redis_unavailable: %s", type(exc).__name__)
            return None
        data: dict[str, Any] = {
            key: dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) else {}
            for key, flat in zip(ms.ALL_KEYS, hashes, strict=True)  # cjson: {} for empty
        }
        data["lock"] = bool(lock)
        return data

    def _ints(self, raw: dict[str, str], *, ordered: bool = True) -> list[tuple[str, int]]:
        """``raw``'s fields with integer values (sorted); the others counted as skipped."""
        out = []
        for field, n in sorted(raw.items()) if ordered else raw.items():
            value = as_int(n)
            if value is None:
                self.skipped["invalid"] += 1
            else:
                out.append((field, value))
        return out

    def _counters(self, data: dict[str, Any], jobs: dict[str, tuple[str, str]]) -> list[Family]:
        def labels(job_id: str) -> tuple[str, str]:
            return jobs.get(job_id, ("", ""))  # a removed job keeps its counts, unlabelled

        ticks = Family(
            "poller_ticks",
            "counter",
            "Ticks by outcome (skipped: lease busy, paused, "
            "breaker open, or the work was fenced off)",
            ["kind", "agent", "job_id", "status"],
        )
        for field, n in self._ints(data[ms.TICKS]):
            job_id, status = _split(field)
            ticks.add([*labels(job_id), job_id, status], n)
        out = [ticks]
        for key, name, doc in (
            (ms.SEEN, "poller_items_seen", "Items the poller saw"),
            (ms.DISPATCHED, "poller_items_dispatched", "Items the poller handed to delivery"),
        ):
            fam = Family(name, "counter", doc, ["kind", "job_id"])
            for job_id, n in self._ints(data[key]):
                fam.add([labels(job_id)[0], job_id], n)
            out.append(fam)
        out.append(self._latency(data[ms.LATENCY], labels))
        takeovers = Family(
            "poller_lease_takeovers",
            "counter",
            "Ticks that took over the lease of a tick "
            "that never finished (its worker died or stalled)",
            ["job_id"],
        )
        counts = {job_id: 0 for job_id in jobs} | dict(self._ints(data[ms.TAKEOVERS]))
        for job_id, n in sorted(counts.items()):  # 0 until one happens
            takeovers.add([job_id], n)
        out.append(takeovers)
        deliveries = Family(
            "poller_deliveries",
            "counter",
            "Delivery attempts by channel and outcome",
            ["channel", "status"],
        )
        for field, n in self._ints(data[ms.DELIVERIES]):
            deliveries.add(_split(field), n)
        out += [deliveries, self._beat_lag(data[ms.BEAT_LAG]), self._host_wait(data[ms.HOST_WAIT])]
        lock = Family("poller_beat_lock_held", "gauge", "1 while a beat holds the scheduler lock")
        lock.add([], 1 if data["lock"] else 0)
        out.append(lock)
        out += metricspoller.families(
            data[ms.POLLER], data[ms.POLLER_DROPPED], lambda j: labels(j)[0], self.skipped
        )
        return out

    def _latency(self, raw: dict[str, str], labels: Callable[[str], tuple[str, str]]) -> Family:
        per_job: dict[str, dict[int, int]] = defaultdict(dict)
        sums: dict[str, int] = {}
        for field, n in self._ints(raw, ordered=False):
            job_id, idx = _split(field)
            if idx == "sum":
                sums[job_id] = n
            elif (i := as_int(idx)) is not None and 0 <= i <= len(ms.LATENCY_BUCKETS_MS):
                per_job[job_id][i] = n
            else:
                self.skipped["invalid"] += 1
        fam = Family(
            "poller_latency_ms",
            "histogram",
            "Tick latency (the poller's run time), milliseconds",
            ["kind", "job_id"],
        )
        for job_id in sorted(per_job):
            buckets = _buckets(per_job[job_id], ms.LATENCY_BUCKETS_MS)
            fam.add_histogram([labels(job_id)[0], job_id], buckets, float(sums.get(job_id, 0)))
        return fam

    def _beat_lag(self, raw: dict[str, str]) -> Family:
        counts: dict[int, int] = {}
        total = 0
        for field, n in self._ints(raw):
            if field == "sum":
                total = n
            elif (i := as_int(field)) is not None and 0 <= i <= len(ms.LAG_BUCKETS_S):
                counts[i] = n
            else:
                self.skipped["invalid"] += 1
        fam = Family(
            "poller_beat_dispatch_lag_seconds",
            "histogram",
            "How late beat published each due entry, seconds after its slot",
        )
        if counts:
            fam.add_histogram([], _buckets(counts, ms.LAG_BUCKETS_S), total / 1000)
        return fam

    def _host_wait(self, raw: dict[str, str]) -> Family:
        per_host: dict[str, dict[int, int]] = defaultdict(dict)
        sums: dict[str, int] = {}
        for field, n in self._ints(raw, ordered=False):
            host, idx = _split(field)
            if idx == "sum":
                sums[host] = n
            elif (i := as_int(idx)) is not None and 0 <= i <= len(hostwait.WAIT_BUCKETS_S):
                per_host[host][i] = n
            else:
                self.skipped["invalid"] += 1
        fam = Family(
            "poller_host_wait_seconds",
            "histogram",
            "Time requests waited for a turn on their host (per-host politeness caps), seconds",
            ["host"],
        )
        for host in sorted(per_host):
            buckets = _buckets(per_host[host], hostwait.WAIT_BUCKETS_S)
            fam.add_histogram([host], buckets, sums.get(host, 0) / 1000)
        return fam

    # --- the DB --------------------------------------------------------------
    @staticmethod
    def _state(jobs: dict[str, tuple[str, str]]) -> list[Family]:
        now = timezone.now()
        errors = Family("poller_consecutive_errors", "gauge", "Failed ticks in a row", ["job_id"])
        breaker = Family(
            "poller_breaker_state",
            "gauge",
            "Circuit breaker: 0 closed, 1 half-open, 2 open",
            ["job_id"],
        )
        rows = PollState.objects.filter(job_id__in=PollJob.objects.values("job_id")).values_list(
            "job_id", "consecutive_errors", "breaker_open_until"
        )
        for job_id, errs, open_until in rows.order_by("job_id"):
            errors.add([job_id], errs)
            breaker.add([job_id], BREAKER_LABELS[breaker_label(open_until, now=now)])
        outbox = Family(
            "poller_outbox_rows",
            "gauge",
            "Outbox rows waiting (pending), held by a "
            "configuration problem (held) or dead-lettered (dead)",
            ["status"],
        )
        counts = dict(
            Delivery.objects.filter(status__in=["pending", "held", "dead"])
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        for status in ("pending", "held", "dead"):
            outbox.add([status], counts.get(status, 0))
        return [errors, breaker, outbox]


def render() -> bytes:
    logredact.refresh_from_db()  # the secrets of every stored job and agent (once a minute)
    return metricstext.render(ClusterCollector().collect())


def token_ok(request: HttpRequest, expected: str) -> bool:
    """``Authorization: Bearer <expected>``, compared in constant time."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return False
    return hmac.compare_digest(given.strip().encode(), expected.encode())


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.NEXOPOLL_METRICS_TOKEN
    if token and not token_ok(request, token):
        response = HttpResponse(
            "unauthorized: Authorization: Bearer <NEXOPOLL_METRICS_TOKEN>\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE)
