"""docs/grafana-dashboard.json queries only series that /metrics really exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.utils import timezone

from nexopoll.runtime import delivery, metricstore
from nexopoll.runtime.tick import tick_job
from tests.runtime.conftest import scripted

from .test_metrics import cfg, scrape  # noqa: F401 (fixture)

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def test_every_dashboard_series_is_exported(cfg, redis_client):  # noqa: F811
    cfg.write([scripted("a")])
    cfg.reload()
    redis_client.rpush("test:src:a", 1)
    report = tick_job("a", now=timezone.now())
    delivery.deliver_rows(report.delivery_ids, clock=timezone.now)
    pipe = redis_client.pipeline()
    metricstore.queue_beat_lag(pipe, [0.2])
    pipe.execute()
    exported = {name for name, _labels in scrape()}
    doc = json.loads(DASHBOARD.read_text())
    titles = {p["title"] for p in doc["panels"]}
    assert {
        "Beat dispatch lag",
        "Ticks by status",
        "Breaker states",
        "Deliveries by channel and status",
    } <= titles
    used = {
        m
        for p in doc["panels"]
        for t in p["targets"]
        for m in re.findall(r"\bpoller_[a-z_]+", t["expr"])
    }
    assert used and used <= exported, used - exported
