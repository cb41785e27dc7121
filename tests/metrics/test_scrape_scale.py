"""One scrape with 10,000 jobs that all ticked stays well inside a scrape timeout.

Each job also has two series of its own (``metric_inc``), and the log redactor knows
secrets, so the scrape's checking and masking of those series is in the timing. The
time is printed (``-s``); docs/performance.md reports it.
"""

from __future__ import annotations

import time

from django.test import Client

from nexopoll.models import PollState
from nexopoll.runtime import logredact, metricstore
from tests.support.scale import scripted_job_rows

from .test_metrics import cfg, samples  # noqa: F401 (fixture)

N = 10_000


def timed_scrape():
    """GET /metrics: the response, its samples, and the wall and CPU seconds it took."""
    started, cpu = time.monotonic(), time.process_time()
    response = Client().get("/metrics")
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu
    assert response.status_code == 200
    return response, samples(response.content.decode()), elapsed, cpu


def test_scrape_of_ten_thousand_jobs(cfg, redis_client):  # noqa: F811
    ids = [f"job{i:05d}" for i in range(N)]
    scripted_job_rows(ids)
    PollState.objects.bulk_create([PollState(job_id=j) for j in ids], batch_size=1000)
    logredact.register({f"secret-value-{i:04d}" for i in range(50)})
    poller = {("pages", (("source", "rss"),)): 2, ("errors", (("code", "404"),)): 1}
    pipe = redis_client.pipeline(transaction=False)
    for j in ids:
        metricstore.queue_tick(pipe, j, status="ok", ms=12, seen=3, dispatched=1, poller=poller)
    pipe.execute()
    logredact.refresh_from_db(force=True)  # what the scrape would do first
    response, data, elapsed, cpu = timed_scrape()
    ticks = [v for (name, _), v in data.items() if name == "poller_ticks_total"]
    assert len(ticks) == N and sum(ticks) == N
    pages = [v for (name, _), v in data.items() if name == "poller_metric_total"]
    assert len(pages) == 2 * N and sum(pages) == 3 * N
    size = len(response.content) / 1e6
    print(f"scrape of {N} jobs: {elapsed:.2f} s ({cpu:.2f} s CPU in this process), {size:.1f} MB")
    assert elapsed < 10, f"{elapsed:.1f} s"


def test_scrape_of_a_hundred_thousand_stored_series_of_one_job(cfg, redis_client):  # noqa: F811
    """Series an older version stored without caps (550,000 used to time the scrape out):
    the scrape shows what the caps allow and skips the rest, mostly unread."""
    scripted_job_rows(["big"])
    n = 100_000
    for start in range(0, n, 25_000):
        fields = {
            metricstore.poller_field("big", "hits", [("user", f"u{i:06d}")]): 1
            for i in range(start, start + 25_000)
        }
        redis_client.hset(metricstore.POLLER, mapping=fields)
    _, data, elapsed, cpu = timed_scrape()
    hits = [k for (name, k), _ in data.items() if name == "poller_metric_total"]
    assert len(hits) == 100  # NEXOPOLL_METRICS_MAX_LABEL_VALUES
    skipped = data[("nexopoll_metric_series_skipped", frozenset({("reason", "over_limit")}))]
    assert skipped == n - 100
    print(f"scrape of {n} stored series of one job: {elapsed:.2f} s ({cpu:.2f} s CPU)")
    assert elapsed < 10, f"{elapsed:.1f} s"
