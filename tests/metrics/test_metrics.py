"""/metrics after known ticks: the seven seed series and ours, read back from one scrape.

Real Redis and the real DB; ticks run in this process through ``tick_job``; the
scrape goes through Django's test client to the real view.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from nexopoll.models import PollState
from nexopoll.runtime import delivery, lease, metricstore
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import Config, scripted
from tests.support.outbox import outbox_row


@pytest.fixture
def cfg(tmp_path, redis_client, transactional_db) -> Config:
    return Config(tmp_path / "pollers.yaml")


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, frozenset], float]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def get(data, sample: str, /, **labels) -> float | None:
    return data.get((sample, frozenset(labels.items())))


def test_the_seven_series_after_known_ticks(cfg, redis_client):
    cfg.write([scripted("a"), scripted("b", agent="ana")])
    cfg.reload()
    now = timezone.now()
    redis_client.rpush("test:src:a", 1, 2, 3)
    assert tick_job("a", now=now).status == "ok"  # seen 3, dispatched 3
    redis_client.rpush("test:src:a", 4)
    assert tick_job("a", now=now).status == "ok"  # seen 4, dispatched 1
    redis_client.set("test:mode:a", "transient")
    assert tick_job("a", now=now).status == "transient"
    redis_client.set("test:mode:a", "permanent")
    assert tick_job("a", now=now).status == "permanent"  # pauses the job
    assert tick_job("a", now=now).reason == "paused"
    held = lease.try_acquire(redis_client, "b", 10_000)
    assert tick_job("b", now=now).reason == "lease busy"
    lease.release(redis_client, held)

    data = scrape()
    ticks = {
        s: get(data, "poller_ticks_total", kind="scripted", agent="ana", job_id="a", status=s)
        for s in ("ok", "transient", "permanent", "skipped")
    }
    assert ticks == {"ok": 2, "transient": 1, "permanent": 1, "skipped": 1}
    b_skip = get(
        data, "poller_ticks_total", kind="scripted", agent="ana", job_id="b", status="skipped"
    )
    assert b_skip == 1
    assert get(data, "poller_items_seen_total", kind="scripted", job_id="a") == 7
    assert get(data, "poller_items_dispatched_total", kind="scripted", job_id="a") == 4
    # four ticks ran the poller: the latency histogram counted each once
    assert get(data, "poller_latency_ms_count", kind="scripted", job_id="a") == 4
    assert get(data, "poller_latency_ms_bucket", kind="scripted", job_id="a", le="+Inf") == 4
    assert get(data, "poller_latency_ms_count", kind="scripted", job_id="b") is None
    st = PollState.objects.get(job_id="a")
    assert get(data, "poller_consecutive_errors", job_id="a") == st.consecutive_errors == 2
    assert get(data, "poller_breaker_state", job_id="b") == 0
    # every tick counted in Redis also reached the DB's counters (committed ticks)
    assert st.ticks_total == 4


def test_breaker_state_gauge_reads_open_half_open_closed(cfg, redis_client):
    cfg.write([scripted("o"), scripted("h"), scripted("c")])
    cfg.reload()
    now = timezone.now()
    PollState.objects.filter(job_id="o").update(breaker_open_until=now + timedelta(minutes=5))
    PollState.objects.filter(job_id="h").update(breaker_open_until=now - timedelta(seconds=1))
    data = scrape()
    assert [get(data, "poller_breaker_state", job_id=j) for j in "ohc"] == [2, 1, 0]


def test_lease_takeover_is_counted_when_a_tick_never_finished(cfg, redis_client):
    cfg.write([scripted("t"), scripted("u")])
    cfg.reload()
    # the previous tick's worker died mid-tick: running_since stayed set, its lease expired
    PollState.objects.filter(job_id="t").update(running_since=timezone.now())
    assert tick_job("t", now=timezone.now()).status == "ok"
    assert tick_job("t", now=timezone.now()).status == "ok"  # a normal tick: no takeover
    data = scrape()
    assert get(data, "poller_lease_takeovers_total", job_id="t") == 1
    assert get(data, "poller_lease_takeovers_total", job_id="u") == 0  # exported from the start


def test_poller_metric_inc_is_counted_cluster_wide(cfg, redis_client):
    cfg.write([scripted("m")])
    cfg.reload()
    redis_client.rpush("test:metric:m", "pages_fetched", "pages_fetched", "retries")
    tick_job("m", now=timezone.now())
    tick_job("m", now=timezone.now())
    data = scrape()
    labels = {"job_id": "m", "kind": "scripted", "source": "scripted"}
    assert get(data, "poller_metric_total", name="pages_fetched", **labels) == 4
    assert get(data, "poller_metric_total", name="retries", **labels) == 2


def test_deliveries_by_channel_and_status_and_outbox_gauges(cfg, redis_client):
    cfg.write([scripted("d")])
    cfg.reload()
    redis_client.rpush("test:src:d", 1, 2)
    report = tick_job("d", now=timezone.now())
    delivery.deliver_rows(report.delivery_ids, clock=timezone.now)
    now = timezone.now()
    outbox_row("d", at=now, recipient="x", status="dead")
    outbox_row("d", at=now, recipient="x", status="pending")
    data = scrape()
    assert get(data, "poller_deliveries_total", channel="log", status="sent") == 2
    assert get(data, "poller_outbox_rows", status="dead") == 1
    assert get(data, "poller_outbox_rows", status="pending") == 1
    assert get(data, "poller_outbox_rows", status="held") == 0


def test_beat_lag_histogram_and_lock_gauge(cfg, redis_client, settings):
    pipe = redis_client.pipeline()
    metricstore.queue_beat_lag(pipe, [0.001, 0.02, 3.0])
    pipe.execute()
    redis_client.set(settings.CELERY_REDBEAT_KEY_PREFIX + ":lock", "x")
    data = scrape()
    assert get(data, "poller_beat_dispatch_lag_seconds_count") == 3
    assert get(data, "poller_beat_dispatch_lag_seconds_bucket", le="0.025") == 2
    assert get(data, "poller_beat_dispatch_lag_seconds_sum") == pytest.approx(3.021)
    assert get(data, "poller_beat_lock_held") == 1
    redis_client.delete(settings.CELERY_REDBEAT_KEY_PREFIX + ":lock")
    assert get(scrape(), "poller_beat_lock_held") == 0


def test_metrics_off_writes_nothing(cfg, redis_client, settings):
    settings.NEXOPOLL_METRICS = False
    cfg.write([scripted("q")])
    cfg.reload()
    tick_job("q", now=timezone.now())
    assert not any(redis_client.exists(k) for k in metricstore.ALL_KEYS)
    assert PollState.objects.get(job_id="q").ticks_total == 1


def test_token_guard(cfg, redis_client, settings):
    settings.NEXOPOLL_METRICS_TOKEN = "s3cret-metrics-token"
    c = Client()
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert c.get("/metrics?token=s3cret-metrics-token").status_code == 401
    ok = c.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert ok.status_code == 200 and b"poller_outbox_rows" in ok.content
    settings.NEXOPOLL_METRICS_TOKEN = ""
    assert c.get("/metrics").status_code == 200


def test_scrape_without_redis_still_serves_db_series(cfg, redis_client, settings):
    cfg.write([scripted("r")])
    cfg.reload()
    from nexopoll.runtime import redis as rmod

    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    rmod._client = None
    try:
        data = scrape()
    finally:
        rmod._client = None
    assert get(data, "poller_metrics_store_up") == 0
    assert get(data, "poller_breaker_state", job_id="r") == 0
