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
  ``poller_metrics_store_up`` (0 when Redis did not answer this scrape)
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .models import Delivery, PollJob, PollState
from .runtime import metricstore as ms
from .runtime.redis import get_redis

log = logging.getLogger("nexopoll.metrics")

# the text format every Prometheus reads (generate_latest writes it)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RESERVED = {"job_id", "kind", "name", "le", "quantile"}


def _split(field: str) -> tuple[str, str]:
    head, _, tail = field.rpartition(ms.SEP)
    return head, tail


def _buckets(counts: dict[int, int], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    out, running = [], 0
    for i, bound in enumerate(bounds):
        running += counts.get(i, 0)
        out.append((_le(bound), running))
    out.append(("+Inf", running + counts.get(len(bounds), 0)))
    return out


def _le(bound: float) -> str:
    return str(float(bound))


class ClusterCollector:
    """A ``prometheus_client`` collector over Redis and the DB (nothing per process)."""

    def collect(self) -> Iterator[Metric]:
        jobs = {j: (k, a) for j, k, a in PollJob.objects.values_list("job_id", "kind", "agent")}
        redis_data = self._read_redis()
        yield GaugeMetricFamily(
            "poller_metrics_store_up", "1 when Redis (the counter store) answered this scrape",
            value=1 if redis_data is not None else 0,
        )  # fmt: skip
        if redis_data is not None:
            yield from self._counters(redis_data, jobs)
        yield from self._state(jobs)

    # --- Redis ---------------------------------------------------------------
    @staticmethod
    def _read_redis() -> dict[str, Any] | None:
        try:
            pipe = get_redis().pipeline(transaction=False)
            for key in ms.ALL_KEYS:
                pipe.hgetall(key)
            pipe.exists(settings.CELERY_REDBEAT_KEY_PREFIX + ":lock")
            *hashes, lock = pipe.execute()
        except Exception as exc:  # the DB-side series still render
            log.warning("metrics.redis_unavailable: %s", type(exc).__name__)
            return None
        data = dict(zip(ms.ALL_KEYS, hashes, strict=True))
        data["lock"] = bool(lock)
        return data

    def _counters(self, data: dict[str, Any], jobs: dict[str, tuple[str, str]]) -> Iterator[Metric]:
        def labels(job_id: str) -> tuple[str, str]:
            return jobs.get(job_id, ("", ""))  # a removed job keeps its counts, unlabelled

        ticks = CounterMetricFamily(
            "poller_ticks_total", "Ticks by outcome (skipped: lease busy, paused, breaker "
            "open, or the work was fenced off)", labels=["kind", "agent", "job_id", "status"],
        )  # fmt: skip
        for field, n in sorted(data[ms.TICKS].items()):
            job_id, status = _split(field)
            ticks.add_metric([*labels(job_id), job_id, status], float(n))
        yield ticks
        for key, name, doc in (
            (ms.SEEN, "poller_items_seen", "Items the poller saw"),
            (ms.DISPATCHED, "poller_items_dispatched", "Items the poller handed to delivery"),
        ):
            fam = CounterMetricFamily(name, doc, labels=["kind", "job_id"])
            for job_id, n in sorted(data[key].items()):
                fam.add_metric([labels(job_id)[0], job_id], float(n))
            yield fam
        yield self._latency(data[ms.LATENCY], labels)
        takeovers = CounterMetricFamily(
            "poller_lease_takeovers", "Ticks that took over the lease of a tick that never "
            "finished (its worker died or stalled)", labels=["job_id"],
        )  # fmt: skip
        counts = {job_id: 0 for job_id in jobs} | data[ms.TAKEOVERS]  # 0 until one happens
        for job_id, n in sorted(counts.items()):
            takeovers.add_metric([job_id], float(n))
        yield takeovers
        deliveries = CounterMetricFamily(
            "poller_deliveries", "Delivery attempts by channel and outcome",
            labels=["channel", "status"],
        )  # fmt: skip
        for field, n in sorted(data[ms.DELIVERIES].items()):
            deliveries.add_metric(list(_split(field)), float(n))
        yield deliveries
        yield self._beat_lag(data[ms.BEAT_LAG])
        yield GaugeMetricFamily(
            "poller_beat_lock_held", "1 while a beat holds the scheduler lock",
            value=1 if data["lock"] else 0,
        )  # fmt: skip
        yield self._poller_metrics(data[ms.POLLER], labels)

    @staticmethod
    def _latency(raw: dict[str, str], labels: Any) -> Metric:
        per_job: dict[str, dict[int, int]] = defaultdict(dict)
        sums: dict[str, int] = {}
        for field, n in raw.items():
            job_id, idx = _split(field)
            if idx == "sum":
                sums[job_id] = int(n)
            else:
                per_job[job_id][int(idx)] = int(n)
        fam = HistogramMetricFamily(
            "poller_latency_ms", "Tick latency (the poller's run time), milliseconds",
            labels=["kind", "job_id"],
        )  # fmt: skip
        for job_id in sorted(per_job):
            buckets = _buckets(per_job[job_id], ms.LATENCY_BUCKETS_MS)
            fam.add_metric([labels(job_id)[0], job_id], buckets, float(sums.get(job_id, 0)))
        return fam

    @staticmethod
    def _beat_lag(raw: dict[str, str]) -> Metric:
        counts = {int(k): int(v) for k, v in raw.items() if k != "sum"}
        fam = HistogramMetricFamily(
            "poller_beat_dispatch_lag_seconds",
            "How late beat published each due entry, seconds after its slot",
        )
        if counts:
            total = int(raw.get("sum", 0)) / 1000
            fam.add_metric([], _buckets(counts, ms.LAG_BUCKETS_S), total)
        return fam

    @staticmethod
    def _poller_metrics(raw: dict[str, str], labels: Any) -> Metric:
        fam = Metric("poller_metric", "Pollers' own counters (host.metric_inc)", "counter")
        for field, n in sorted(raw.items()):
            try:
                job_id, name, extra = json.loads(field)
            except ValueError:
                continue
            sample = {"job_id": job_id, "kind": labels(job_id)[0], "name": name}
            for k, v in extra:
                if not _LABEL.fullmatch(k) or k in _RESERVED:  # never shadows ours
                    k = "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)
                sample.setdefault(k, v)
            fam.add_sample("poller_metric_total", sample, float(n))
        return fam

    # --- the DB --------------------------------------------------------------
    @staticmethod
    def _state(jobs: dict[str, tuple[str, str]]) -> Iterator[Metric]:
        now = timezone.now()
        errors = GaugeMetricFamily(
            "poller_consecutive_errors", "Failed ticks in a row", labels=["job_id"]
        )
        breaker = GaugeMetricFamily(
            "poller_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open",
            labels=["job_id"],
        )  # fmt: skip
        rows = PollState.objects.filter(job_id__in=PollJob.objects.values("job_id")).values_list(
            "job_id", "consecutive_errors", "breaker_open_until"
        )
        for job_id, errs, open_until in rows.order_by("job_id"):
            errors.add_metric([job_id], float(errs))
            state = 0 if open_until is None else (2 if now < open_until else 1)
            breaker.add_metric([job_id], float(state))
        yield errors
        yield breaker
        outbox = GaugeMetricFamily(
            "poller_outbox_rows", "Outbox rows waiting (pending), held by a configuration "
            "problem (held) or dead-lettered (dead)", labels=["status"],
        )  # fmt: skip
        counts = dict(
            Delivery.objects.filter(status__in=["pending", "held", "dead"])
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        for status in ("pending", "held", "dead"):
            outbox.add_metric([status], float(counts.get(status, 0)))
        yield outbox


def render() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector())
    return generate_latest(registry)


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
        response = HttpResponse("unauthorized: Authorization: Bearer <NEXOPOLL_METRICS_TOKEN>\n",
                                status=401, content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE)
