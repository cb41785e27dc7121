"""A poller's own series are bounded: per label per job and metric, and per job.

The caps are applied where the tick writes (one Lua script on its release pipeline,
real Redis): a series past a cap is not stored, its increments are counted in
``nexopoll_metric_series_dropped_total{job_id,metric}``. Series stored before the caps
existed (or under larger ones) are capped again by the scrape, counted as skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from django.utils import timezone

from nexopoll.runtime import metricstore as ms
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import scripted

from .test_metrics import cfg, get, scrape  # noqa: F401 (fixture)


def calls(name: str, labels: list[dict]) -> list[str]:
    return [json.dumps({"name": name, "labels": lab}) for lab in labels]


def series(data, name: str, job_id: str) -> dict[frozenset, float]:
    wanted = {("name", name), ("job_id", job_id)}
    return {
        labels: v
        for (sample, labels), v in data.items()
        if sample == "poller_metric_total" and wanted <= labels
    }


def test_values_past_the_label_cap_are_dropped_and_counted(cfg, redis_client):  # noqa: F811
    cfg.write([scripted("a"), scripted("b")])
    cfg.reload()
    redis_client.rpush("test:metric:a", *calls("hits", [{"user": f"u{i}"} for i in range(150)]))
    redis_client.rpush("test:metric:b", *calls("hits", [{"user": f"u{i}"} for i in range(3)]))
    assert tick_job("a", now=timezone.now()).status == "ok"
    assert tick_job("b", now=timezone.now()).status == "ok"
    data = scrape()
    kept = series(data, "hits", "a")
    assert len(kept) == 100 and set(kept.values()) == {1}
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="a", metric="hits") == 50
    assert len(series(data, "hits", "b")) == 3  # another job has caps of its own
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="b", metric="hits") is None

    # the next tick: the 100 kept values still count, the others are dropped again
    redis_client.delete("test:metric:a")
    redis_client.rpush("test:metric:a", *calls("hits", [{"user": "u0"}, {"user": "u140"}]))
    tick_job("a", now=timezone.now())
    data = scrape()
    assert len(series(data, "hits", "a")) == 100
    assert (
        get(data, "poller_metric_total", job_id="a", kind="scripted", name="hits", user="u0") == 2
    )
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="a", metric="hits") == 51


def test_the_cap_holds_across_ticks(cfg, redis_client, settings):  # noqa: F811
    settings.NEXOPOLL_METRICS_MAX_LABEL_VALUES = 10
    cfg.write([scripted("c")])
    cfg.reload()
    for tick in range(3):  # 3 ticks of 6 new values each: 10 kept, 8 dropped
        redis_client.delete("test:metric:c")
        labels = [{"page": f"p{tick}-{i}"} for i in range(6)]
        redis_client.rpush("test:metric:c", *calls("views", labels))
        tick_job("c", now=timezone.now())
    data = scrape()
    assert len(series(data, "views", "c")) == 10
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="c", metric="views") == 8


def test_the_series_cap_per_job_bounds_new_names_too(cfg, redis_client, settings):  # noqa: F811
    settings.NEXOPOLL_METRICS_MAX_SERIES_PER_JOB = 10
    cfg.write([scripted("n")])
    cfg.reload()
    redis_client.rpush("test:metric:n", *calls("known", [{"k": str(i)} for i in range(4)]))
    redis_client.rpush("test:metric:n", *calls("known", [{"k": str(i)} for i in range(4, 8)]))
    redis_client.rpush(
        "test:metric:n", *[json.dumps({"name": f"item_{i}", "labels": {}}) for i in range(20)]
    )
    tick_job("n", now=timezone.now())
    data = scrape()
    stored = [k for (s, k) in data if s == "poller_metric_total" and ("job_id", "n") in k]
    assert len(stored) == 10
    # drops of a name the job has series of are counted under it; of a new name under "*"
    assert get(data, "nexopoll_metric_series_dropped_total", job_id="n", metric="*") == 18


def test_series_stored_before_the_caps_are_capped_by_the_scrape(cfg, redis_client):  # noqa: F811
    cfg.write([scripted("old")])
    cfg.reload()
    fields = {ms.poller_field("old", "hits", [("user", f"u{i:03d}")]): 2 for i in range(130)}
    redis_client.hset(ms.POLLER, mapping=fields)  # written by a version without caps
    data = scrape()
    kept = series(data, "hits", "old")
    assert len(kept) == 100
    assert (
        frozenset({("user", "u000"), ("job_id", "old"), ("kind", "scripted"), ("name", "hits")})
        in kept
    )
    assert get(data, "nexopoll_metric_series_skipped", reason="over_limit") == 30
    assert get(data, "nexopoll_metric_series_skipped", reason="invalid") == 0


def test_the_caps_are_read_from_the_environment():
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.NEXOPOLL_METRICS_MAX_LABEL_VALUES, s.NEXOPOLL_METRICS_MAX_SERIES_PER_JOB)"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "nexopoll.settings",
        "NEXOPOLL_METRICS_MAX_LABEL_VALUES": "7",
        "NEXOPOLL_METRICS_MAX_SERIES_PER_JOB": "42",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["7", "42"], out.stderr[-2000:]
